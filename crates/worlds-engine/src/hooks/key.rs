//! Where the key hook tokens are derived from comes from.
//!
//! Whoever holds the key can derive the token of every waiting hook, so it belongs outside the
//! data directory: a copy of the directory (a backup, a support bundle) must not be enough to
//! resume anything. In order:
//!
//! 1. [`WorldConfig::hook_secret`](crate::WorldConfig::hook_secret);
//! 2. the [`HOOK_SECRET_ENV`] environment variable;
//! 3. the file at [`WorldConfig::hook_key_file`](crate::WorldConfig::hook_key_file) (64 hex
//!    digits, as `openssl rand -hex 32` prints);
//! 4. in memory, a fresh random key per world;
//! 5. in a durable world, `state/hook-key` inside its directory, created on first use. This
//!    keeps existing directories working, but a copy of the directory can derive every token,
//!    so it is warned about when the world opens.

use std::path::Path;

use crate::config::WorldConfig;
use crate::error::WorldError;

use super::HookKey;

/// The environment variable a hook secret is read from when
/// [`WorldConfig::hook_secret`](crate::WorldConfig::hook_secret) is unset.
pub const HOOK_SECRET_ENV: &str = "WORLDS_ENGINE_HOOK_SECRET";

/// The file under a durable world's directory that holds its key when nothing else is set.
const KEY_IN_DIRECTORY: &str = "state/hook-key";

/// Where a world's hook key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeySource {
    /// `WorldConfig::hook_secret`.
    Config,
    /// The [`HOOK_SECRET_ENV`] environment variable.
    Environment,
    /// `WorldConfig::hook_key_file`.
    KeyFile,
    /// Drawn at random for a memory world.
    Random,
    /// `state/hook-key` in the world's own directory.
    DataDirectory,
}

/// The key `config` calls for, reading the environment through `env`.
pub(crate) fn resolve(
    config: &WorldConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(HookKey, KeySource), WorldError> {
    if let Some(secret) = &config.hook_secret {
        return Ok((HookKey::from_secret(&secret.0), KeySource::Config));
    }
    if let Some(secret) = env(HOOK_SECRET_ENV) {
        if secret.trim().is_empty() {
            return Err(WorldError::invalid(
                HOOK_SECRET_ENV,
                "is set but empty; set it to a long random string (the same in every process on the directory) or unset it",
            ));
        }
        return Ok((HookKey::from_secret(&secret), KeySource::Environment));
    }
    if let Some(path) = &config.hook_key_file {
        let key = read_key_file(path)?;
        if config.persistence.uses_directory() && is_inside(path, &config.persistence_path) {
            tracing::warn!(
                file = %path.display(),
                dir = %config.persistence_path.display(),
                "the hook key file is inside the data directory, so a copy of the directory can derive every hook token; keep it outside"
            );
        }
        return Ok((key, KeySource::KeyFile));
    }
    if !config.persistence.uses_directory() {
        // A PostgreSQL world is handed its key by the crate that opens it (kept in the
        // database, the same for every process).
        return Ok((HookKey::random(), KeySource::Random));
    }
    let root = &config.persistence_path;
    let key = load_or_create(root).map_err(|e| {
        WorldError::Internal(format!(
            "could not read or create the hook key {}: {e}; fix or remove the file, or configure a key (WorldConfig::hook_secret, {HOOK_SECRET_ENV} or WorldConfig::hook_key_file)",
            root.join(KEY_IN_DIRECTORY).display()
        ))
    })?;
    tracing::warn!(
        dir = %root.display(),
        "hook tokens can be derived from a copy of this directory: their key is stored in it ({KEY_IN_DIRECTORY}). Set WorldConfig::hook_secret, the {HOOK_SECRET_ENV} environment variable or WorldConfig::hook_key_file; moving {KEY_IN_DIRECTORY} out of the directory and pointing hook_key_file at it keeps the tokens already handed out"
    );
    Ok((key, KeySource::DataDirectory))
}

/// Reads a key file: 64 hex digits, surrounding whitespace ignored.
fn read_key_file(path: &Path) -> Result<HookKey, WorldError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        WorldError::invalid(
            "hook_key_file",
            format!(
                "could not read {}: {e}; create it with 64 hex digits, e.g. `openssl rand -hex 32 > {}`",
                path.display(),
                path.display()
            ),
        )
    })?;
    HookKey::from_hex(&text).ok_or_else(|| {
        WorldError::invalid(
            "hook_key_file",
            format!(
                "{} does not hold a key: it must hold 64 hex digits (32 random bytes), e.g. from `openssl rand -hex 32`",
                path.display()
            ),
        )
    })
}

/// True if `path` lies under `dir` (both resolved; false if either cannot be).
fn is_inside(path: &Path, dir: &Path) -> bool {
    match (path.canonicalize(), dir.canonicalize()) {
        (Ok(path), Ok(dir)) => path.starts_with(dir),
        _ => false,
    }
}

/// The key in `state/hook-key` under `root`, created (owner-only) if missing. Several processes
/// on one directory read the same key.
fn load_or_create(root: &Path) -> std::io::Result<HookKey> {
    let path = root.join(KEY_IN_DIRECTORY);
    if let Some(state) = path.parent() {
        std::fs::create_dir_all(state)?;
    }
    let invalid = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it does not hold 64 hex digits",
        )
    };
    for _ in 0..2 {
        match std::fs::read_to_string(&path) {
            Ok(text) => return HookKey::from_hex(&text).ok_or_else(invalid),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let key = HookKey::random();
        // Linked into place complete, so no process reads half a key; if another process
        // created it first, theirs is read on the next round.
        if crate::atomic_file::create_new(&path, key.to_hex().as_bytes(), true)? {
            return Ok(key);
        }
    }
    Err(std::io::Error::other("it kept changing while being read"))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::config::HookSecret;
    use crate::config::Persistence;

    fn durable(dir: &Path) -> WorldConfig {
        WorldConfig {
            persistence: Persistence::File,
            persistence_path: dir.to_path_buf(),
            ..WorldConfig::default()
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_secret(name: &str) -> Option<String> {
        (name == HOOK_SECRET_ENV).then(|| "from env".to_owned())
    }

    fn same(a: &HookKey, b: &HookKey) -> bool {
        a.token("wrun_1", 0) == b.token("wrun_1", 0)
    }

    /// Runs `f` and returns what it logged.
    fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        let value = tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        (value, text)
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_configured_secret_comes_first_then_the_environment_then_the_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let key_file = outside.path().join("hook.key");
        let file_key = HookKey::random();
        fs::write(&key_file, format!("{}\n", file_key.to_hex())).unwrap();
        let mut config = durable(&dir.path().join("data"));
        config.hook_key_file = Some(key_file);

        let (key, source) = resolve(&config, no_env).unwrap();
        assert_eq!(source, KeySource::KeyFile);
        assert!(same(&key, &file_key));

        let (key, source) = resolve(&config, env_secret).unwrap();
        assert_eq!(source, KeySource::Environment);
        assert!(same(&key, &HookKey::from_secret("from env")));

        config.hook_secret = Some(HookSecret("configured".into()));
        let (key, source) = resolve(&config, env_secret).unwrap();
        assert_eq!(source, KeySource::Config);
        assert!(same(&key, &HookKey::from_secret("configured")));

        assert!(!dir.path().join("data").exists(), "nothing written");
    }

    #[test]
    fn a_bad_key_file_or_an_empty_environment_secret_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = durable(dir.path());
        config.hook_key_file = Some(dir.path().join("missing.key"));
        let error = resolve(&config, no_env).unwrap_err().to_string();
        assert!(error.contains("openssl rand -hex 32"), "{error}");
        fs::write(dir.path().join("missing.key"), "not a key").unwrap();
        assert!(resolve(&config, no_env).is_err());
        let empty = |_: &str| Some(" ".to_owned());
        let error = resolve(&config, empty).unwrap_err().to_string();
        assert!(error.contains(HOOK_SECRET_ENV), "{error}");
    }

    #[test]
    fn a_key_kept_in_the_directory_is_warned_about_and_stays_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let config = durable(dir.path());
        let ((first, source), log) = logged(|| resolve(&config, no_env).unwrap());
        assert_eq!(source, KeySource::DataDirectory);
        assert!(log.contains("can be derived from a copy"), "{log}");
        assert!(log.contains(HOOK_SECRET_ENV), "{log}");
        // An existing directory keeps its key, so tokens handed out still verify.
        let ((second, _), log) = logged(|| resolve(&config, no_env).unwrap());
        assert!(same(&first, &second));
        assert!(log.contains("can be derived from a copy"), "{log}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join(KEY_IN_DIRECTORY))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        fs::write(dir.path().join(KEY_IN_DIRECTORY), b"short").unwrap();
        assert!(resolve(&config, no_env).is_err());
    }

    #[test]
    fn a_configured_key_is_not_warned_about_and_memory_worlds_draw_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = durable(dir.path());
        config.hook_secret = Some(HookSecret("s".into()));
        let (_, log) = logged(|| resolve(&config, no_env).unwrap());
        assert!(log.is_empty(), "{log}");
        let (a, source) = resolve(&WorldConfig::memory(), no_env).unwrap();
        assert_eq!(source, KeySource::Random);
        let (b, _) = resolve(&WorldConfig::memory(), no_env).unwrap();
        assert!(!same(&a, &b));
    }

    #[test]
    fn a_key_file_inside_the_directory_is_warned_about() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hook.key");
        fs::write(&path, HookKey::random().to_hex()).unwrap();
        let mut config = durable(dir.path());
        config.hook_key_file = Some(path);
        let ((_, source), log) = logged(|| resolve(&config, no_env).unwrap());
        assert_eq!(source, KeySource::KeyFile);
        assert!(log.contains("inside the data directory"), "{log}");
    }
}
