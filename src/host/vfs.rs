//! The virtual file store of agent-loop plugins (`../shared/spec/agent-hooks.md`,
//! "Host services": vfs): a tree of text files and *symbolic* nodes whose
//! content their owning plugin computes on each read.
//!
//! Paths are normalised one way everywhere ([`normalize`]): `\` becomes `/`,
//! a leading `/` is added, `.` and empty parts are dropped, `..` is clamped
//! at the root — so no path names anything outside the tree. A plugin
//! writes only below `/plugins/<its name>`; it reads everything, as the
//! embedder does. Directories exist implicitly, as prefixes of files.
//!
//! This module decides paths and who may write where; the nodes live in the
//! state store (`host::store`, which also holds each plugin's quota). It
//! never calls a plugin: a symbolic read returns [`Read::Symbolic`] and the
//! caller asks the owner.

use std::sync::Arc;

pub use crate::host::store::Node;
use crate::host::store::{Store, StoreError, quota};

/// `path` in normal form (see the module doc).
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The subtree plugin `name` may write.
pub fn plugin_root(name: &str) -> String {
    normalize(&format!("/plugins/{name}"))
}

/// Who writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer<'a> {
    /// The embedder or the operator: anywhere, without quota.
    Host,
    /// A plugin: below its own root only, within its quota.
    Plugin(&'a str),
}

/// What a read found.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    Text(String),
    /// Ask `owner` (its `vfs/read_symbolic`) for the content of `path`.
    Symbolic {
        owner: String,
        path: String,
    },
    /// Not a file: the names below it, sorted.
    Directory(Vec<String>),
    Missing,
}

/// Why a change was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VfsError {
    #[error("plugin '{plugin}' may only write below {root}, not {path}")]
    NotYours { plugin: String, root: String, path: String },
    #[error("the root of the tree cannot be a file")]
    Root,
    /// Over the writer's quota (the text names the limit).
    #[error("{0}")]
    Quota(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for VfsError {
    fn from(e: StoreError) -> Self {
        match e.kind {
            crate::host::store::StoreErrorKind::Quota(reason) => VfsError::Quota(reason),
            _ => VfsError::Store(e),
        }
    }
}

/// The tree, kept in the state store. Every method blocks (a store call):
/// on the async runtime, call it through `host::store::off_runtime`.
#[derive(Clone)]
pub struct Vfs {
    store: Arc<dyn Store>,
}

impl Vfs {
    /// The tree in `store`.
    pub fn new(store: Arc<dyn Store>) -> Vfs {
        Vfs { store }
    }

    fn check(writer: Writer<'_>, path: &str) -> Result<String, VfsError> {
        let path = normalize(path);
        if path == "/" {
            return Err(VfsError::Root);
        }
        if let Writer::Plugin(name) = writer {
            let root = plugin_root(name);
            if !Self::owns(&root, &path) {
                return Err(VfsError::NotYours { plugin: name.to_owned(), root, path });
            }
        }
        Ok(path)
    }

    /// A plugin owns its root, everything below it, and the single files
    /// `<root>.<ext>` beside it (FaustBot plugins describe themselves in
    /// `/plugins/<id>.md`). Not `<root>-…`: that is another plugin's name.
    fn owns(root: &str, path: &str) -> bool {
        path == root
            || path.starts_with(&format!("{root}/"))
            || path.strip_prefix(&format!("{root}.")).is_some_and(|ext| !ext.is_empty() && !ext.contains('/'))
    }

    fn put(&self, writer: Writer<'_>, path: &str, node: impl FnOnce(String) -> Node) -> Result<String, VfsError> {
        let path = Self::check(writer, path)?;
        let (owner, limits) = match writer {
            Writer::Host => ("host".to_owned(), None),
            Writer::Plugin(name) => (name.to_owned(), Some(&quota::VFS)),
        };
        self.store.vfs_put(&path, &node(owner), limits)?;
        Ok(path)
    }

    /// Writes a text file (replacing a symbolic node there).
    ///
    /// # Errors
    /// Outside the writer's subtree, the root, over a plugin's quota, or the
    /// store failed (then nothing changed).
    pub fn write(&self, writer: Writer<'_>, path: &str, content: &str) -> Result<String, VfsError> {
        self.put(writer, path, |owner| Node::File { content: content.to_owned(), owner })
    }

    /// Declares a symbolic node owned by the writing plugin.
    ///
    /// # Errors
    /// As [`Vfs::write`].
    pub fn write_symbolic(&self, writer: Writer<'_>, path: &str, searchable: bool) -> Result<String, VfsError> {
        self.put(writer, path, |owner| Node::Symbolic { owner, searchable })
    }

    /// Reads `path`: a file's text, who computes a symbolic node, a
    /// directory's children, or missing.
    ///
    /// # Errors
    /// The store failed.
    pub fn read(&self, path: &str) -> Result<Read, VfsError> {
        let path = normalize(path);
        Ok(match self.store.vfs_get(&path)? {
            Some(Node::File { content, .. }) => Read::Text(content),
            Some(Node::Symbolic { owner, .. }) => Read::Symbolic { owner, path },
            None => {
                let children = self.store.vfs_list(&path)?;
                if children.is_empty() && path != "/" { Read::Missing } else { Read::Directory(children) }
            }
        })
    }

    /// The names directly below `path`, sorted, without repeats.
    ///
    /// # Errors
    /// The store failed.
    pub fn list(&self, path: &str) -> Result<Vec<String>, VfsError> {
        Ok(self.store.vfs_list(&normalize(path))?)
    }

    /// Deletes `path` and everything below it; `true` when something went.
    ///
    /// # Errors
    /// Outside the writer's subtree, or the store failed.
    pub fn delete(&self, writer: Writer<'_>, path: &str) -> Result<bool, VfsError> {
        let path = Self::check(writer, path)?;
        Ok(self.store.vfs_delete(&path)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_have_one_normal_form_and_never_leave_the_tree() {
        assert_eq!(normalize(""), "/");
        assert_eq!(normalize("a/b"), "/a/b");
        assert_eq!(normalize("\\a\\.\\b\\"), "/a/b");
        assert_eq!(normalize("//a///b/./c"), "/a/b/c");
        assert_eq!(normalize("/a/../../../etc/passwd"), "/etc/passwd");
        assert_eq!(normalize(".."), "/");
    }

    #[test]
    fn plugins_write_their_subtree_and_read_everything() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let vfs = Vfs::new(Arc::new(crate::host::store::sqlite::SqliteStore::open(&db).unwrap()));
        let notes = Writer::Plugin("notes");
        assert_eq!(vfs.write(notes, "plugins\\notes\\./today.md", "milk").unwrap(), "/plugins/notes/today.md");
        vfs.write(notes, "/plugins/notes/old/a.md", "a").unwrap();
        vfs.write(Writer::Host, "/shared/readme", "hi").unwrap();
        let err = vfs.write(notes, "/plugins/notes/../other/x", "no").unwrap_err().to_string();
        assert_eq!(err, "plugin 'notes' may only write below /plugins/notes, not /plugins/other/x");
        assert!(vfs.write(notes, "/plugins/notesX/y", "no").is_err(), "a prefix of another name is not its subtree");
        assert!(vfs.write(notes, "/plugins/notes-b/y", "no").is_err(), "`notes-b` is another plugin's name");
        assert_eq!(vfs.write(notes, "/plugins/notes.md", "about").unwrap(), "/plugins/notes.md", "its own .md beside");
        assert!(vfs.write(notes, "/plugins/notes./x", "no").is_err());
        vfs.delete(notes, "/plugins/notes.md").unwrap();
        assert!(vfs.delete(Writer::Plugin("other"), "/plugins/notes").is_err());

        assert_eq!(vfs.read("/plugins/notes/today.md").unwrap(), Read::Text("milk".into()));
        assert_eq!(vfs.read("/plugins/notes").unwrap(), Read::Directory(vec!["old".into(), "today.md".into()]));
        assert_eq!(vfs.list("/").unwrap(), ["plugins", "shared"]);
        assert_eq!(vfs.read("/missing").unwrap(), Read::Missing);

        vfs.write_symbolic(notes, "/plugins/notes/live", true).unwrap();
        assert_eq!(
            vfs.read("/plugins/notes/live").unwrap(),
            Read::Symbolic { owner: "notes".into(), path: "/plugins/notes/live".into() }
        );

        assert!(vfs.delete(notes, "/plugins/notes/old").unwrap());
        assert!(!vfs.delete(notes, "/plugins/notes/old").unwrap(), "already gone");
        assert_eq!(vfs.list("/plugins/notes").unwrap(), ["live", "today.md"]);

        // Survives a restart.
        drop(vfs);
        let again = Vfs::new(Arc::new(crate::host::store::sqlite::SqliteStore::open(&db).unwrap()));
        assert_eq!(again.read("/plugins/notes/today.md").unwrap(), Read::Text("milk".into()));
        assert!(matches!(again.read("/plugins/notes/live").unwrap(), Read::Symbolic { .. }));
    }
}
