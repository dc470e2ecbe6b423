//! The manifests `imagemap resolve` reads: each path a file, or a folder searched
//! recursively for `.yaml` / `.yml` files (in name order), as `kubectl apply -f` would. The
//! documents are read by `core::manifests`.

use std::path::{Path, PathBuf};

use crate::core::manifests::{DocumentError, Manifests};

/// A file that cannot be read or a document that is not valid.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Document(#[from] DocumentError),
}

/// Reads each of `paths`. Objects without a namespace get `default_namespace`.
pub fn load(paths: &[PathBuf], default_namespace: &str) -> Result<Manifests, LoadError> {
    let mut out = Manifests::default();
    for path in paths {
        for file in yaml_files(path)? {
            let text = std::fs::read_to_string(&file).map_err(|source| LoadError::Io {
                path: file.clone(),
                source,
            })?;
            out.add_stream(&file, &text, default_namespace)?;
        }
    }
    Ok(out)
}

fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    let mut out = Vec::new();
    for entry in entries {
        if entry.is_dir() {
            out.extend(yaml_files(&entry)?);
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(entry);
        }
    }
    Ok(out)
}
