//! Streams on disk, for the file and hybrid stores: `streams/{run_id}/{name}.ndjson`, append-only,
//! one chunk per line (see [`line`](super::line)), the last line `{"done":true}` once closed.
//! Names are percent-encoded into file names (bytes other than ASCII letters, digits, `-`, `_`
//! and a `.` that does not lead become `%XX`).
//!
//! A stream's chunks are loaded into memory the first time it is used. Each write appends one
//! line under an exclusive advisory lock on the file, after reading whatever the file gained
//! since (another process may write to the same stream), so indexes stay dense across
//! processes. Readers of a shared directory check the file's size before each read and pick up
//! what other processes appended; a torn last line (a write in progress, or a crash mid-write)
//! is left to the next writer, which cuts it off under the lock.
//!
//! **Durability.** The file store syncs each chunk (`sync_data`) before acknowledging it, as it
//! does events. The hybrid store does not sync chunks one by one: a chunk is in the file (so a
//! process crash keeps it) but only synced when its stream is closed, so a power loss can drop
//! the last chunks of an open stream. Chunks written by workflow code are written again by
//! replay, so those come back either way.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::error::WorldError;
use crate::store::file::{check_run_id, io_error, sync_dir};
use crate::store::{FileStore, HybridStore};
use crate::streams::{StreamChunk, StreamInfo};

use super::line::Line;
use super::{NewChunk, Signals, StreamSignal, StreamState, StreamStore, EMPTY};

/// Extension of a stream file.
const SUFFIX: &str = ".ndjson";

/// One stream file and what of it is loaded.
struct FileStream {
    state: StreamState,
    path: PathBuf,
    file: File,
    /// Bytes of the file applied to `state`.
    len: u64,
}

type Slot = Arc<Mutex<FileStream>>;

/// The streams of a store directory.
pub(crate) struct FileStreams {
    dir: PathBuf,
    /// Other processes may write to the same files: read what they appended before each read.
    shared: bool,
    /// Sync each chunk before acknowledging it.
    sync_each: bool,
    read_only: bool,
    open: Mutex<HashMap<(String, String), Slot>>,
    signals: Signals,
}

impl std::fmt::Debug for FileStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStreams")
            .field("dir", &self.dir)
            .field("open", &self.open.lock().len())
            .finish()
    }
}

impl FileStreams {
    /// The streams under `root/streams`: shared and synced for each chunk (the file store), or
    /// neither (the hybrid store, which holds its directory alone).
    pub(crate) fn new(root: &Path, shared: bool, read_only: bool) -> Self {
        FileStreams {
            dir: root.join("streams"),
            shared,
            sync_each: shared,
            read_only,
            open: Mutex::new(HashMap::new()),
            signals: Signals::default(),
        }
    }

    fn path(&self, run_id: &str, name: &str) -> PathBuf {
        self.dir
            .join(run_id)
            .join(format!("{}{SUFFIX}", encode_name(name)))
    }

    fn writable(&self, run_id: &str) -> Result<(), WorldError> {
        if self.read_only {
            return Err(WorldError::Unsupported(format!(
                "file store: {} was opened read-only; writes are refused",
                self.dir.display()
            )));
        }
        check_run_id(run_id)
    }

    /// The stream, loaded; `None` if it has no file (and `create` is false).
    fn slot(&self, run_id: &str, name: &str, create: bool) -> Result<Option<Slot>, WorldError> {
        let key = (run_id.to_owned(), name.to_owned());
        if let Some(slot) = self.open.lock().get(&key) {
            return Ok(Some(slot.clone()));
        }
        if check_run_id(run_id).is_err() {
            return Ok(None);
        }
        let path = self.path(run_id, name);
        let mut options = OpenOptions::new();
        options.read(true);
        if !self.read_only {
            options.append(true);
        }
        let file = match options.open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => self.create(&path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("could not open", &path, e)),
        };
        let mut stream = FileStream {
            state: StreamState::default(),
            path,
            file,
            len: 0,
        };
        catch_up(&mut stream, false)?;
        let slot = self
            .open
            .lock()
            .entry(key)
            .or_insert_with(|| Arc::new(Mutex::new(stream)))
            .clone();
        Ok(Some(slot))
    }

    /// Creates a stream file (and its run's directory), durably when chunks are synced.
    fn create(&self, path: &Path) -> Result<File, WorldError> {
        let run_dir = path.parent().unwrap_or(&self.dir);
        let new_dir = !run_dir.exists();
        fs::create_dir_all(run_dir).map_err(|e| io_error("could not create", run_dir, e))?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| io_error("could not create", path, e))?;
        if self.sync_each {
            sync_dir(run_dir)?;
            if new_dir {
                sync_dir(&self.dir)?;
            }
        }
        Ok(file)
    }

    /// Runs `f` on the stream under the file's lock, after reading what the file gained.
    fn locked<T>(
        &self,
        run_id: &str,
        name: &str,
        f: impl FnOnce(&mut FileStream) -> Result<T, WorldError>,
    ) -> Result<T, WorldError> {
        self.writable(run_id)?;
        let Some(slot) = self.slot(run_id, name, true)? else {
            return Err(WorldError::Internal(format!(
                "stream '{name}' of run {run_id} could not be created"
            )));
        };
        let mut stream = slot.lock();
        let path = stream.path.clone();
        if self.shared {
            stream
                .file
                .lock()
                .map_err(|e| io_error("could not lock", &path, e))?;
        }
        let result = catch_up(&mut stream, true).and_then(|()| f(&mut stream));
        if self.shared {
            stream
                .file
                .unlock()
                .map_err(|e| io_error("could not unlock", &path, e))?;
        }
        drop(stream);
        self.signals.bump(run_id);
        result
    }

    fn write(&self, run_id: &str, name: &str, new: NewChunk) -> Result<StreamChunk, WorldError> {
        let sync = self.sync_each;
        self.locked(run_id, name, |stream| {
            if let Some(stored) = stream.state.keyed(new.key.as_deref()) {
                return Ok(stored);
            }
            stream.state.check_open(run_id, name)?;
            let chunk = stream.state.next_chunk(&new);
            let line = Line::chunk(&chunk, new.key.as_deref());
            append(stream, &line, sync)?;
            stream.state.push(chunk.clone(), new.key);
            Ok(chunk)
        })
    }

    fn close(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
        self.locked(run_id, name, |stream| {
            if stream.state.is_done() {
                return Ok(());
            }
            append(stream, &Line::close(), true)?;
            stream.state.close();
            Ok(())
        })
    }

    fn close_run(&self, run_id: &str) -> Result<(), WorldError> {
        if self.read_only {
            return Ok(());
        }
        for name in self.names(run_id)? {
            if !self.chunks(run_id, &name, u64::MAX, 0)?.1.done {
                self.close(run_id, &name)?;
            }
        }
        // Readers of streams the run never wrote to end now too.
        self.signals.bump(run_id);
        Ok(())
    }

    fn chunks(
        &self,
        run_id: &str,
        name: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
        let Some(slot) = self.slot(run_id, name, false)? else {
            return Ok((Vec::new(), EMPTY));
        };
        let mut stream = slot.lock();
        if self.shared {
            catch_up(&mut stream, false)?;
        }
        Ok((stream.state.page(from, limit), stream.state.info()))
    }

    fn names(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
        if check_run_id(run_id).is_err() {
            return Ok(Vec::new());
        }
        let dir = self.dir.join(run_id);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("could not list", &dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("could not list", &dir, e))?;
            let file_name = entry.file_name();
            let Some(encoded) = file_name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            if let Some(name) = decode_name(encoded) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Appends one line and (if `sync`) syncs it.
fn append(stream: &mut FileStream, line: &[u8], sync: bool) -> Result<(), WorldError> {
    let mut out = &stream.file;
    out.write_all(line)
        .and_then(|()| {
            if sync {
                stream.file.sync_data()
            } else {
                Ok(())
            }
        })
        .map_err(|e| io_error("could not write", &stream.path, e))?;
    stream.len += line.len() as u64;
    Ok(())
}

/// Applies what the file holds beyond `stream.len`. With `exclusive` (the caller holds the
/// file's lock, or no other process uses it) an incomplete last line is cut off: it is what a
/// crash mid-write left.
fn catch_up(stream: &mut FileStream, exclusive: bool) -> Result<(), WorldError> {
    let path = stream.path.clone();
    let size = stream
        .file
        .metadata()
        .map_err(|e| io_error("could not read", &path, e))?
        .len();
    if size == stream.len {
        return Ok(());
    }
    if size < stream.len {
        return Err(corrupt(
            &path,
            size,
            format!("the file shrank from {} to {size} bytes", stream.len),
        ));
    }
    let mut bytes = Vec::with_capacity((size - stream.len) as usize);
    let mut file = &stream.file;
    file.seek(SeekFrom::Start(stream.len))
        .and_then(|_| file.take(size - stream.len).read_to_end(&mut bytes))
        .map_err(|e| io_error("could not read", &path, e))?;
    let mut offset = 0;
    while let Some(end) = bytes[offset..].iter().position(|b| *b == b'\n') {
        let at = stream.len + offset as u64;
        let text = &bytes[offset..offset + end];
        let line: Line =
            serde_json::from_slice(text).map_err(|e| corrupt(&path, at, e.to_string()))?;
        match line.into_chunk().map_err(|e| corrupt(&path, at, e))? {
            Some((chunk, key)) => {
                if stream.state.is_done() || chunk.index != stream.state.len() {
                    return Err(corrupt(
                        &path,
                        at,
                        format!(
                            "chunk index {} where {} was expected",
                            chunk.index,
                            stream.state.len()
                        ),
                    ));
                }
                stream.state.push(chunk, key);
            }
            None => stream.state.close(),
        }
        offset += end + 1;
    }
    stream.len += offset as u64;
    if exclusive && stream.len < size {
        tracing::warn!(file = %path.display(), offset = stream.len, "cutting off an incomplete last line of a stream");
        stream
            .file
            .set_len(stream.len)
            .map_err(|e| io_error("could not truncate", &path, e))?;
    }
    Ok(())
}

fn corrupt(path: &Path, offset: u64, why: impl std::fmt::Display) -> WorldError {
    WorldError::Internal(format!(
        "file store: {} is corrupt at byte offset {offset}: {why}",
        path.display()
    ))
}

/// A stream name as a file name: `%XX` for every byte but ASCII letters, digits, `-`, `_` and a
/// `.` that does not lead.
fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode_name(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = encoded.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Implements [`StreamStore`] for a store with a `streams: FileStreams` field.
macro_rules! file_stream_store {
    ($store:ty) => {
        #[async_trait]
        impl StreamStore for $store {
            async fn write_chunk(
                &self,
                run_id: &str,
                name: &str,
                chunk: NewChunk,
            ) -> Result<StreamChunk, WorldError> {
                self.streams.write(run_id, name, chunk)
            }

            async fn close_stream(&self, run_id: &str, name: &str) -> Result<(), WorldError> {
                self.streams.close(run_id, name)
            }

            async fn close_run_streams(&self, run_id: &str) -> Result<(), WorldError> {
                self.streams.close_run(run_id)
            }

            async fn stream_chunks(
                &self,
                run_id: &str,
                name: &str,
                from: u64,
                limit: usize,
            ) -> Result<(Vec<StreamChunk>, StreamInfo), WorldError> {
                self.streams.chunks(run_id, name, from, limit)
            }

            async fn list_streams(&self, run_id: &str) -> Result<Vec<String>, WorldError> {
                self.streams.names(run_id)
            }

            fn watch_streams(&self, run_id: &str) -> StreamSignal {
                self.streams.signals.subscribe(run_id)
            }
        }
    };
}

file_stream_store!(FileStore);
file_stream_store!(HybridStore);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_file_names() {
        for name in [
            "default",
            "a.b",
            ".hidden",
            "agent/tokens",
            "ünï côdé",
            "50%",
            "a b",
        ] {
            let encoded = encode_name(name);
            assert!(!encoded.starts_with('.'));
            assert!(!encoded.contains('/'));
            assert_eq!(decode_name(&encoded).as_deref(), Some(name));
        }
    }
}
