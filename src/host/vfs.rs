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
//! This module holds the tree and its file; it never calls a plugin: a
//! symbolic read returns [`Read::Symbolic`] and the caller asks the owner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Node {
    File { content: String, owner: String },
    Symbolic { owner: String, searchable: bool },
}

/// Who writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer<'a> {
    /// The embedder or the operator: anywhere.
    Host,
    /// A plugin: below its own root only.
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

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VfsError {
    #[error("plugin '{plugin}' may only write below {root}, not {path}")]
    NotYours { plugin: String, root: String, path: String },
    #[error("the root of the tree cannot be a file")]
    Root,
    #[error("vfs file `{}`: {reason}", file.display())]
    File { file: PathBuf, reason: String },
}

/// The tree and the file it lives in.
#[derive(Debug)]
pub struct Vfs {
    nodes: BTreeMap<String, Node>,
    file: PathBuf,
}

impl Vfs {
    /// The tree stored in `file` (none yet: empty).
    ///
    /// # Errors
    /// A file that exists but cannot be read or parsed.
    pub fn open(file: &Path) -> Result<Vfs, VfsError> {
        let fail = |reason: String| VfsError::File { file: file.to_owned(), reason };
        let nodes = super::load_json(file).map_err(|e| fail(e.to_string()))?;
        Ok(Vfs { nodes, file: file.to_owned() })
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

    fn owner(writer: Writer<'_>) -> String {
        match writer {
            Writer::Host => "host".to_owned(),
            Writer::Plugin(name) => name.to_owned(),
        }
    }

    /// What `owner`'s nodes take: their number, and the bytes of their
    /// files' text, without the node at `except` (the one being replaced).
    pub fn usage(&self, owner: &str, except: &str) -> (usize, usize) {
        let except = normalize(except);
        self.nodes.iter().filter(|(path, _)| **path != except).fold((0, 0), |(n, bytes), (_, node)| match node {
            Node::File { content, owner: o } if o == owner => (n + 1, bytes + content.len()),
            Node::Symbolic { owner: o, .. } if o == owner => (n + 1, bytes),
            _ => (n, bytes),
        })
    }

    /// Writes a text file (replacing a symbolic node there).
    ///
    /// # Errors
    /// Outside the writer's subtree, the root, or the file cannot be saved.
    pub fn write(&mut self, writer: Writer<'_>, path: &str, content: &str) -> Result<String, VfsError> {
        let path = Self::check(writer, path)?;
        self.nodes.insert(path.clone(), Node::File { content: content.to_owned(), owner: Self::owner(writer) });
        self.save()?;
        Ok(path)
    }

    /// Declares a symbolic node owned by the writing plugin.
    ///
    /// # Errors
    /// As [`Vfs::write`].
    pub fn write_symbolic(&mut self, writer: Writer<'_>, path: &str, searchable: bool) -> Result<String, VfsError> {
        let path = Self::check(writer, path)?;
        self.nodes.insert(path.clone(), Node::Symbolic { owner: Self::owner(writer), searchable });
        self.save()?;
        Ok(path)
    }

    /// Reads `path`: a file's text, who computes a symbolic node, a
    /// directory's children, or missing.
    pub fn read(&self, path: &str) -> Read {
        let path = normalize(path);
        match self.nodes.get(&path) {
            Some(Node::File { content, .. }) => Read::Text(content.clone()),
            Some(Node::Symbolic { owner, .. }) => Read::Symbolic { owner: owner.clone(), path },
            None => {
                let children = self.list(&path);
                if children.is_empty() && path != "/" { Read::Missing } else { Read::Directory(children) }
            }
        }
    }

    /// A file's text, or `default` when there is none (FaustBot's `read_text`).
    pub fn read_text(&self, path: &str, default: &str) -> String {
        match self.read(path) {
            Read::Text(text) => text,
            _ => default.to_owned(),
        }
    }

    /// The names directly below `path`, sorted, without repeats.
    pub fn list(&self, path: &str) -> Vec<String> {
        let path = normalize(path);
        let prefix = if path == "/" { "/".to_owned() } else { format!("{path}/") };
        let mut names: Vec<String> = self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| k[prefix.len()..].split('/').next().map(str::to_owned))
            .collect();
        names.dedup();
        names
    }

    /// Deletes `path` and everything below it; `true` when something went.
    ///
    /// # Errors
    /// Outside the writer's subtree, or the file cannot be saved.
    pub fn delete(&mut self, writer: Writer<'_>, path: &str) -> Result<bool, VfsError> {
        let path = Self::check(writer, path)?;
        let prefix = format!("{path}/");
        let before = self.nodes.len();
        self.nodes.retain(|k, _| *k != path && !k.starts_with(&prefix));
        let removed = self.nodes.len() != before;
        if removed {
            self.save()?;
        }
        Ok(removed)
    }

    fn save(&self) -> Result<(), VfsError> {
        super::save_json(&self.file, &self.nodes).map_err(|reason| VfsError::File { file: self.file.clone(), reason })
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
        let file = dir.path().join("vfs.json");
        let mut vfs = Vfs::open(&file).unwrap();
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

        assert_eq!(vfs.read("/plugins/notes/today.md"), Read::Text("milk".into()));
        assert_eq!(vfs.read_text("/nope", "default"), "default");
        assert_eq!(vfs.read("/plugins/notes"), Read::Directory(vec!["old".into(), "today.md".into()]));
        assert_eq!(vfs.list("/"), ["plugins", "shared"]);
        assert_eq!(vfs.read("/missing"), Read::Missing);

        vfs.write_symbolic(notes, "/plugins/notes/live", true).unwrap();
        assert_eq!(
            vfs.read("/plugins/notes/live"),
            Read::Symbolic { owner: "notes".into(), path: "/plugins/notes/live".into() }
        );

        assert!(vfs.delete(notes, "/plugins/notes/old").unwrap());
        assert!(!vfs.delete(notes, "/plugins/notes/old").unwrap(), "already gone");
        assert_eq!(vfs.list("/plugins/notes"), ["live", "today.md"]);

        // Survives a restart.
        let again = Vfs::open(&file).unwrap();
        assert_eq!(again.read_text("/plugins/notes/today.md", ""), "milk");
        assert!(matches!(again.read("/plugins/notes/live"), Read::Symbolic { .. }));
    }
}
