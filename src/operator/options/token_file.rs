//! The bearer token registries send with push notifications, read from its file
//! (`--registry-notifications-token-file`) — and read again whenever the file changes, as a
//! mounted Secret does when it is rotated, so a new token takes effect without a restart.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

/// Most bytes of a token file read.
const TOKEN_FILE_LIMIT: u64 = 4 << 10;

/// What tells one version of the file from another: its modification time, size and
/// inode (a Secret volume swaps in a new file).
type Stamp = (Option<SystemTime>, u64, u64);

/// The token file and the token last read from it.
pub struct TokenFile {
    path: PathBuf,
    read: Mutex<(Stamp, Arc<str>)>,
}

/// The path only: the token never reaches a log.
impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    /// Reads the token from `path`; an error says what is wrong with the file.
    pub fn open(path: &Path) -> Result<TokenFile, String> {
        let (stamp, token) = read(path)?;
        Ok(TokenFile {
            path: path.to_path_buf(),
            read: Mutex::new((stamp, token)),
        })
    }

    /// The token in force: the file's, read again if it changed since; the last one read
    /// while it cannot be read (a Secret being swapped).
    pub fn token(&self) -> Arc<str> {
        let mut read_last = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = stamp(&self.path).is_ok_and(|s| s != read_last.0);
        if changed {
            match read(&self.path) {
                Ok((stamp, token)) => {
                    if *token != *read_last.1 {
                        tracing::info!(file = %self.path.display(), "registry notification token changed");
                    }
                    *read_last = (stamp, token);
                }
                Err(e) => {
                    tracing::warn!(file = %self.path.display(), error = %e, "cannot read the registry notification token again; keeping the last one");
                }
            }
        }
        Arc::clone(&read_last.1)
    }
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok((meta.modified().ok(), meta.len(), meta.ino()))
}

/// The file's stamp and its token (trimmed), bounded in bytes.
fn read(path: &Path) -> Result<(Stamp, Arc<str>), String> {
    let shown = path.display();
    let stamp = stamp(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(TOKEN_FILE_LIMIT + 1).read_to_string(&mut text))
        .map_err(|e| format!("{shown}: {e}"))?;
    if text.len() as u64 > TOKEN_FILE_LIMIT {
        return Err(format!(
            "{shown}: longer than {TOKEN_FILE_LIMIT} bytes; put only the token registries send in it"
        ));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "{shown}: the file is empty; put the token registries send in it"
        ));
    }
    Ok((stamp, token.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_read_again_and_a_broken_one_keeps_the_last_token() {
        let dir = std::env::temp_dir().join(format!("token-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let file = TokenFile::open(&path).unwrap();
        assert_eq!(&*file.token(), "first");
        assert!(!format!("{file:?}").contains("first"), "never in a log");
        // Swapped in as a Secret volume does: a new file renamed over the old.
        let next = dir.join("token.new");
        std::fs::write(&next, "second-token").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(&*file.token(), "second-token");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            &*file.token(),
            "second-token",
            "kept while the file is gone"
        );
        std::fs::write(&path, "   ").unwrap();
        assert_eq!(
            &*file.token(),
            "second-token",
            "an empty file is not a token"
        );
        assert!(TokenFile::open(&path).unwrap_err().contains("empty"));
        std::fs::write(&path, "x".repeat(5000)).unwrap();
        assert!(TokenFile::open(&path).unwrap_err().contains("longer than"));
        assert!(TokenFile::open(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
