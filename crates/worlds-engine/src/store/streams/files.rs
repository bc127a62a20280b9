//! Streams on disk, for the file and hybrid stores: `streams/{run_id}/{name}.ndjson`, append-only,
//! one chunk per line (see [`line`](super::line)), the last line `{"done":true}` once closed.
//! Names are percent-encoded into file names (bytes other than ASCII letters, digits, `-`, `_`
//! and a `.` that does not lead become `%XX`). An encoding too long for a file name (most file
//! systems allow 255 bytes; a 200-byte name of multi-byte characters encodes to 600) is cut to
//! a readable prefix plus `~` and a hash of the whole name, and the name itself is kept beside
//! the stream in `{that}.name`, written before the stream file is created.
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
use crate::model::stream::{StreamChunk, StreamInfo};
use crate::store::file::{check_run_id, io_error, sync_dir};
use crate::store::{FileStore, HybridStore};

use super::line::Line;
use super::{NewChunk, Signals, StreamSignal, StreamState, StreamStore, EMPTY};

/// Extension of a stream file.
const SUFFIX: &str = ".ndjson";
/// Extension of the file holding the name of a stream whose file name is hashed.
const NAME_SUFFIX: &str = ".name";
/// Longest file name a stream may have, its extension included.
const MAX_FILE_NAME: usize = 255;
/// Bytes of the readable prefix of a hashed file name.
const HASHED_PREFIX: usize = 64;

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
            .join(format!("{}{SUFFIX}", file_stem(name).0))
    }

    /// Checks that a hashed stream file belongs to `name`, writing the name beside it first if
    /// `create` (a second stream whose name hashes alike is refused, never mixed in).
    fn claim_hashed(&self, path: &Path, name: &str, create: bool) -> Result<bool, WorldError> {
        let stem = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(SUFFIX))
            .unwrap_or_default();
        let sidecar = path.with_file_name(format!("{stem}{NAME_SUFFIX}"));
        if create {
            crate::atomic_file::create_new(&sidecar, name.as_bytes(), false)
                .map_err(|e| io_error("could not write", &sidecar, e))?;
        }
        match fs::read(&sidecar) {
            Ok(stored) if stored == name.as_bytes() => Ok(true),
            Ok(_) => Err(WorldError::Conflict {
                message: format!(
                    "stream '{name}' hashes to the file of another stream ({}); use another name",
                    sidecar.display()
                ),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error("could not read", &sidecar, e)),
        }
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
        if file_stem(name).1 && !self.claim_hashed(&path, name, false)? {
            if !create {
                return Ok(None);
            }
            let run_dir = path.parent().unwrap_or(&self.dir);
            fs::create_dir_all(run_dir).map_err(|e| io_error("could not create", run_dir, e))?;
            self.claim_hashed(&path, name, true)?;
        }
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

    /// Deletes every stream of a removed run (its directory) and forgets them; live readers are
    /// woken to find them gone. Another process that had one loaded keeps serving what it
    /// loaded until it reopens the directory.
    pub(crate) fn remove_run(&self, run_id: &str) -> Result<(), WorldError> {
        if self.read_only || check_run_id(run_id).is_err() {
            return Ok(());
        }
        self.open.lock().retain(|(run, _), _| run != run_id);
        let dir = self.dir.join(run_id);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {
                if self.sync_each {
                    sync_dir(&self.dir)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("could not remove", &dir, e)),
        }
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
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            if stem.contains(HASH_MARK) {
                let sidecar = dir.join(format!("{stem}{NAME_SUFFIX}"));
                match fs::read(&sidecar) {
                    Ok(bytes) => names.extend(String::from_utf8(bytes).ok()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_error("could not read", &sidecar, e)),
                }
            } else if let Some(name) = decode_name(stem) {
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
    encode_name_from(name, false)
}

/// [`encode_name`] of a part of a name; `inside` if the part does not start the name.
fn encode_name_from(name: &str, inside: bool) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && (inside || i > 0)) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Separates the readable prefix of a hashed file name from its hash; `encode_name` escapes it.
const HASH_MARK: char = '~';

/// The file name of stream `name` without its extension, and whether it is hashed: the
/// encoding when the file name fits, else a prefix of it, `~` and 32 hex digits of the name's
/// SHA-256.
fn file_stem(name: &str) -> (String, bool) {
    let encoded = encode_name(name);
    if encoded.len() + SUFFIX.len().max(NAME_SUFFIX.len()) <= MAX_FILE_NAME {
        return (encoded, false);
    }
    let mut prefix = String::new();
    for c in name.chars() {
        let mut buf = [0u8; 4];
        let part = encode_name_from(c.encode_utf8(&mut buf), !prefix.is_empty());
        if prefix.len() + part.len() > HASHED_PREFIX {
            break;
        }
        prefix.push_str(&part);
    }
    let digest = <sha2::Sha256 as sha2::Digest>::digest(name.as_bytes());
    let mut stem = prefix;
    stem.push(HASH_MARK);
    for b in &digest[..16] {
        stem.push_str(&format!("{b:02x}"));
    }
    (stem, true)
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
            assert_eq!(
                file_stem(name),
                (encoded, false),
                "names that fit keep their file"
            );
        }
    }

    #[test]
    fn long_encodings_are_cut_and_hashed_within_the_file_name_limit() {
        let long = "é".repeat(90);
        let (stem, hashed) = file_stem(&long);
        assert!(hashed);
        assert!(stem.len() + SUFFIX.len() <= MAX_FILE_NAME);
        assert!(stem.starts_with("%C3%A9"));
        assert_ne!(file_stem(&"é".repeat(91)).0, stem);
        // The longest encoding that fits is kept as it is.
        let fits = "a".repeat(MAX_FILE_NAME - SUFFIX.len());
        assert_eq!(file_stem(&fits), (fits.clone(), false));
        assert!(file_stem(&format!("{fits}a")).1);
        assert!(!encode_name("a~b").contains(HASH_MARK));
    }
}
