//! Wiring for knowledge bases: opens the store and the retrieval library on a data folder,
//! with the engine's embedding model behind retrieval's `Embedder` and `TokenCounter`
//! traits, and the knowledge search the agent and the diagnostic graph read through.
//! Shared by the CLI commands and the server.

use std::path::Path;
use std::sync::Arc;

use crate::engine::{EmbedModelHandle, EmbeddingTokenizer};
use crate::retrieval::{
    EmbedError, Embedder, Library, RetrievalConfig, RetrievalError, SearchHit, SearchMode,
    TokenCounter,
};
use crate::store::Store;

/// The database file inside the data folder.
pub const DATABASE_FILE: &str = "warden.db";
/// The index folder inside the data folder.
pub const INDEX_DIR: &str = "kb";

/// Hybrid search over the knowledge bases a caller may read.
pub trait KnowledgeSearch: Send + Sync {
    /// At most `limit` hits for `query` in `readable` (all knowledge bases when `None`).
    fn search(
        &self,
        query: &str,
        readable: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, String>;

    /// The names `query` asks about (a tool, a product, a setting) that nothing in
    /// `readable` (all knowledge bases when `None`) mentions.
    fn unmentioned_names(
        &self,
        query: &str,
        readable: Option<&[String]>,
    ) -> Result<Vec<String>, String>;
}

/// The retrieval library's hybrid search.
pub struct LibrarySearch(pub Arc<Library>);

impl KnowledgeSearch for LibrarySearch {
    fn search(
        &self,
        query: &str,
        readable: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, String> {
        self.0
            .search(query, readable, SearchMode::Hybrid, limit)
            .map_err(|err| err.to_string())
    }

    fn unmentioned_names(
        &self,
        query: &str,
        readable: Option<&[String]>,
    ) -> Result<Vec<String>, String> {
        self.0
            .unmentioned_names(query, readable)
            .map_err(|err| err.to_string())
    }
}

/// The embedding model, as retrieval sees it.
struct EngineEmbedder(EmbedModelHandle);

impl Embedder for EngineEmbedder {
    fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0
            .embed_blocking(texts)
            .map(|e| e.vectors)
            .map_err(|e| EmbedError(e.to_string()))
    }

    fn dimensions(&self) -> usize {
        self.0.info().dimensions.unwrap_or(0)
    }
}

/// The embedding tokenizer, as retrieval's token counter.
struct TokenCounterOf(EmbeddingTokenizer);

impl TokenCounter for TokenCounterOf {
    fn count(&self, text: &str) -> usize {
        self.0.count(text)
    }

    fn unknown_share(&self, text: &str) -> f32 {
        self.0.unknown_share(text)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Retrieval(#[from] RetrievalError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error("cannot create data folder {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
}

/// Opens (creating if needed) the knowledge-base library in `data_dir`, embedding with
/// the engine's model.
pub fn open_library(
    data_dir: &Path,
    embedder: EmbedModelHandle,
    config: RetrievalConfig,
) -> Result<(Arc<Store>, Library), KnowledgeError> {
    let store = open_store(data_dir)?;
    let library = open_library_on(store.clone(), data_dir, embedder, config)?;
    Ok((store, library))
}

/// Opens (creating if needed) the data folder's database. A folder Warden creates is
/// private to its owner.
pub fn open_store(data_dir: &Path) -> Result<Arc<Store>, KnowledgeError> {
    ensure_data_dir(data_dir).map_err(|source| KnowledgeError::DataDir {
        path: data_dir.display().to_string(),
        source,
    })?;
    Ok(Arc::new(Store::open(&data_dir.join(DATABASE_FILE))?))
}

/// Creates the data folder, owner-only, unless it exists.
pub fn ensure_data_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    create_private_dir(dir)
}

/// Makes an existing data folder and everything in it (database, indexes, backups)
/// readable by its owner only: folders 0700, files 0600. Symbolic links are not followed.
/// Returns how many entries had to change.
pub fn make_data_private(dir: &Path) -> std::io::Result<usize> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mut changed = 0;
        let mut pending = vec![dir.to_path_buf()];
        while let Some(path) = pending.pop() {
            // The data folder itself may be a link to where the data lives; nothing inside
            // it is followed.
            let metadata = if path == dir {
                std::fs::metadata(&path)?
            } else {
                std::fs::symlink_metadata(&path)?
            };
            let wanted = if metadata.is_dir() {
                for entry in std::fs::read_dir(&path)? {
                    pending.push(entry?.path());
                }
                0o700
            } else if metadata.is_file() {
                0o600
            } else {
                continue;
            };
            if metadata.permissions().mode() & 0o777 != wanted {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(wanted))?;
                changed += 1;
            }
        }
        Ok(changed)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(0)
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Opens the library of `data_dir` on an already open store. The data folder itself can
/// never become a knowledge base.
pub fn open_library_on(
    store: Arc<Store>,
    data_dir: &Path,
    embedder: EmbedModelHandle,
    config: RetrievalConfig,
) -> Result<Library, KnowledgeError> {
    let counter = token_counter(&embedder)?;
    Ok(Library::open(
        &data_dir.join(INDEX_DIR),
        store,
        Arc::new(EngineEmbedder(embedder)),
        counter,
        protecting_data(config, data_dir),
    )?)
}

fn protecting_data(mut config: RetrievalConfig, data_dir: &Path) -> RetrievalConfig {
    config.roots.protect(data_dir, "data folder");
    config
}

/// The embedding model's tokenizer as a token counter.
pub fn token_counter(embedder: &EmbedModelHandle) -> Result<Arc<dyn TokenCounter>, KnowledgeError> {
    Ok(Arc::new(TokenCounterOf(EmbeddingTokenizer::load(
        Path::new(&embedder.info().path),
    )?)))
}

/// Opens the library with any embedder (evaluations swap in their own).
pub fn open_library_with(
    data_dir: &Path,
    embedder: Arc<dyn Embedder>,
    counter: Arc<dyn TokenCounter>,
    config: RetrievalConfig,
) -> Result<(Arc<Store>, Library), KnowledgeError> {
    let store = open_store(data_dir)?;
    let library = Library::open(
        &data_dir.join(INDEX_DIR),
        store.clone(),
        embedder,
        counter,
        protecting_data(config, data_dir),
    )?;
    Ok((store, library))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn an_existing_data_folder_is_made_private_without_following_links() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let outside = tempfile::tempdir().unwrap();
        let shared_file = outside.path().join("shared.txt");
        std::fs::write(&shared_file, "x").unwrap();
        std::fs::set_permissions(&shared_file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let data = tempfile::tempdir().unwrap();
        let index = data.path().join(INDEX_DIR);
        std::fs::create_dir(&index).unwrap();
        std::fs::write(index.join("segment"), "x").unwrap();
        std::fs::write(data.path().join("warden.db"), "x").unwrap();
        for path in [data.path(), &index] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(
            index.join("segment"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::os::unix::fs::symlink(&shared_file, data.path().join("link")).unwrap();

        assert!(make_data_private(data.path()).unwrap() >= 3);
        assert_eq!(mode(data.path()), 0o700);
        assert_eq!(mode(&index), 0o700);
        assert_eq!(mode(&index.join("segment")), 0o600);
        assert_eq!(mode(&data.path().join("warden.db")), 0o600);
        assert_eq!(mode(&shared_file), 0o644, "a link's target is not changed");
        assert_eq!(make_data_private(data.path()).unwrap(), 0);
    }
}
