//! The folders a data directory indexes, recorded in its database so that
//! every command and every process sees one list: `run DIR…` and
//! `folders add` record a folder, `folders remove` takes one out, and
//! `run`, `discover` and `watch` without a folder take them all.
//!
//! Keys stay unique per folder: the first folder a data directory records
//! keys its documents by their path relative to it (as every data directory
//! made before there could be several did), the ones added after it by
//! their full path (`DirSource::keyed_by_full_path`). A folder inside
//! another indexed folder, or holding one, is refused (its files would be
//! indexed twice under two keys), and so is a folder beside an HTTP source
//! (keys of one source mean nothing to another).

use std::path::{Path, PathBuf};

use leasehold::source::{full_path_prefix, key_below_folder, key_for, relative_path_of, DirSource};
use leasehold::upstream::ListingReport;
use leasehold::Store;

use super::error::CliError;

/// The setting holding the folder keyed relative to it: the first one the
/// data directory recorded (the only one older releases knew of).
const SOURCE_ROOT: &str = "source_root";
/// The setting holding the folders keyed by full path, as a JSON array.
const FULL_PATH_FOLDERS: &str = "source_folders";
/// The setting holding the HTTP source's base URL, when the data directory
/// indexes one (`sync`, `discover` without a folder) instead of folders.
pub(crate) const SOURCE_URL: &str = "source_url";
/// The settings the record is made of, in the order [`Recorded`] reads them.
const SETTINGS: [&str; 3] = [SOURCE_ROOT, FULL_PATH_FOLDERS, SOURCE_URL];
/// The settings that say a data directory indexes folders.
pub(crate) const FOLDER_SETTINGS: [&str; 2] = [SOURCE_ROOT, FULL_PATH_FOLDERS];

/// What a data directory records of where its documents come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The folder keyed relative to its root.
    pub relative: Option<PathBuf>,
    /// The folders keyed by full path, in the order they were added.
    pub full: Vec<PathBuf>,
    /// The HTTP source's base URL.
    pub url: Option<String>,
}

/// How a folder's documents are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// By their path relative to the folder.
    Relative,
    /// By their full path.
    FullPath,
}

impl Keys {
    /// What the keys of the folder at `root` start with: nothing when they
    /// are relative; the root and a separator when they are full paths (a
    /// root that is not UTF-8 is never recorded so: NUL, which starts no
    /// key, stands in).
    fn prefix(self, root: &Path) -> String {
        match self {
            Keys::Relative => String::new(),
            Keys::FullPath => full_path_prefix(root).unwrap_or_else(|| "\0".into()),
        }
    }
}

/// Why a folder cannot be added.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// The data directory indexes this HTTP source.
    Http(String),
    /// The folder lies inside this indexed folder.
    Inside(PathBuf),
    /// The folder holds this indexed folder.
    Holds(PathBuf),
    /// Its path is not UTF-8, and it would be keyed by full path.
    NotUtf8,
}

impl Recorded {
    /// The record of `store`.
    pub fn load(store: &Store) -> Result<Recorded, CliError> {
        let mut values = Vec::with_capacity(SETTINGS.len());
        for name in SETTINGS {
            values.push(store.meta(name)?);
        }
        Recorded::from_settings(&values).map_err(CliError::Config)
    }

    /// The record from the settings' values ([`SETTINGS`] order).
    fn from_settings(values: &[Option<String>]) -> Result<Recorded, String> {
        let full = match &values[1] {
            None => Vec::new(),
            Some(json) => serde_json::from_str(json)
                .map_err(|e| format!("the data directory's list of folders cannot be read ({e})"))?,
        };
        Ok(Recorded {
            relative: values[0].as_ref().map(PathBuf::from),
            full,
            url: values[2].clone(),
        })
    }

    /// Write the folders back into the settings' values ([`SETTINGS`]
    /// order); the URL is never changed here.
    fn to_settings(&self, values: &mut [Option<String>]) {
        values[0] = self.relative.as_ref().map(|p| p.display().to_string());
        values[1] = match self.full.is_empty() {
            true => None,
            false => serde_json::to_string(&self.full).ok(),
        };
    }

    /// Every folder with how its keys are made, the relative one first.
    pub fn folders(&self) -> Vec<(&Path, Keys)> {
        let relative = self.relative.iter().map(|p| (p.as_path(), Keys::Relative));
        relative
            .chain(self.full.iter().map(|p| (p.as_path(), Keys::FullPath)))
            .collect()
    }

    /// Every folder with what its keys start with ([`Keys::prefix`]).
    pub fn key_prefixes(&self) -> Vec<(PathBuf, String)> {
        let folders = self.folders().into_iter();
        folders
            .map(|(root, keys)| (root.to_path_buf(), keys.prefix(root)))
            .collect()
    }

    /// Whether no folder is recorded.
    pub fn has_no_folder(&self) -> bool {
        self.relative.is_none() && self.full.is_empty()
    }

    /// Record the folder at `root` (canonical); false when it is recorded
    /// already. The first folder of a data directory is keyed relative to
    /// it, the others by full path.
    fn add(&mut self, root: &Path) -> Result<bool, Refused> {
        if let Some(url) = &self.url {
            return Err(Refused::Http(url.clone()));
        }
        for (held, _) in self.folders() {
            if held == root {
                return Ok(false);
            }
            if root.starts_with(held) {
                return Err(Refused::Inside(held.to_path_buf()));
            }
            if held.starts_with(root) {
                return Err(Refused::Holds(held.to_path_buf()));
            }
        }
        if self.has_no_folder() {
            self.relative = Some(root.to_path_buf());
        } else if full_path_prefix(root).is_none() {
            return Err(Refused::NotUtf8);
        } else {
            self.full.push(root.to_path_buf());
        }
        Ok(true)
    }

    /// Take the folder at `root` out; how its keys were made, when it was
    /// recorded.
    fn remove(&mut self, root: &Path) -> Option<Keys> {
        if self.relative.as_deref() == Some(root) {
            self.relative = None;
            return Some(Keys::Relative);
        }
        let at = self.full.iter().position(|p| p == root)?;
        self.full.remove(at);
        Some(Keys::FullPath)
    }

    /// The folder recorded under the path `given` names: itself, or its
    /// canonical form when it still exists.
    fn recorded_as(&self, given: &Path) -> Option<PathBuf> {
        let candidates = [given.canonicalize().ok(), std::path::absolute(given).ok()];
        candidates
            .into_iter()
            .flatten()
            .find(|c| self.folders().iter().any(|(held, _)| held == c))
    }

    /// Where the original of document `key` is, when a recorded folder
    /// holds it. Says nothing of whether the file exists.
    pub fn path_of(&self, key: &str) -> Option<PathBuf> {
        self.folders().into_iter().find_map(|(root, keys)| {
            let below = key_below_folder(&keys.prefix(root), key)?;
            relative_path_of(below).ok().map(|rel| root.join(rel))
        })
    }

    /// The key of the file at `path` (absolute, its directory canonical),
    /// when it lies inside a recorded folder.
    pub fn key_of(&self, path: &Path) -> Option<String> {
        self.folders().into_iter().find_map(|(root, keys)| {
            let rel = path.strip_prefix(root).ok()?;
            if rel.as_os_str().is_empty() {
                return None;
            }
            Some(format!("{}{}", keys.prefix(root), key_for(rel)))
        })
    }
}

/// Record the folders `dirs` in `store` (data directory `data`, for
/// messages), in one transaction, and say on stderr each that was not
/// recorded before. Returns them opened, canonical.
pub fn add(store: &Store, data: &str, dirs: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut roots = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let source = DirSource::open(dir).map_err(|e| CliError::Config(e.to_string()))?;
        roots.push(source.root().to_path_buf());
    }
    if listed_before_sources_were_recorded(store)? {
        return Err(CliError::Config(format!(
            "{data} belongs to an HTTP source (listed by an older leasehold, which did \
             not record its base URL); use another --data for {}",
            roots[0].display()
        )));
    }
    let decided = store.edit_meta(&SETTINGS, |values| {
        let mut record = Recorded::from_settings(values).map_err(CliError::Config)?;
        let mut added = Vec::new();
        for root in &roots {
            match record.add(root) {
                Ok(true) => added.push(root.clone()),
                Ok(false) => {}
                Err(why) => return Err(refusal(data, root, why)),
            }
        }
        record.to_settings(values);
        Ok((added, record.folders().len()))
    })?;
    let (added, count) = decided?;
    for root in &added {
        if count > 1 {
            super::progress::say(&format!(
                "leasehold: {data} now indexes {} as well ({count} folders; `leasehold folders` lists them)",
                root.display()
            ));
        }
    }
    Ok(roots)
}

/// Take the folders `dirs` out of `store`: each is no longer scanned or
/// watched, and its documents are marked gone (their search entries go,
/// `gc` removes their results). Returns, per folder, how many documents
/// went. A folder not recorded is refused before anything changes. The
/// documents go first and the record after: a removal cut short leaves the
/// folder recorded (its next run finds its files again, a second removal
/// finishes), never documents that no recorded folder holds.
pub fn remove(store: &Store, data: &str, dirs: &[PathBuf]) -> Result<Vec<(PathBuf, usize)>, CliError> {
    let record = Recorded::load(store)?;
    let mut roots = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let root = record.recorded_as(dir).ok_or_else(|| {
            CliError::Config(format!(
                "{}: not a folder of {data} (`leasehold folders` lists them)",
                dir.display()
            ))
        })?;
        roots.push(root);
    }
    let mut gone = Vec::with_capacity(roots.len());
    for (root, keys) in record
        .folders()
        .into_iter()
        .filter(|(r, _)| roots.iter().any(|x| x == r))
    {
        let n = leasehold::source::mark_folder_gone(store, &keys.prefix(root))
            .map_err(|e| CliError::Runtime(e.to_string()))?;
        gone.push((root.to_path_buf(), n));
    }
    store.edit_meta(&SETTINGS, |values| {
        let mut record = Recorded::from_settings(values).map_err(CliError::Config)?;
        for root in &roots {
            record.remove(root);
        }
        record.to_settings(values);
        Ok::<_, CliError>(())
    })??;
    Ok(gone)
}

/// The recorded folders, opened as sources (keyed as recorded), and a line
/// for each one that cannot be opened (unmounted, removed): those are left
/// out of this command, their documents untouched.
pub fn open(record: &Recorded) -> (Vec<DirSource>, Vec<String>) {
    let (mut opened, mut unavailable) = (Vec::new(), Vec::new());
    for (root, keys) in record.folders() {
        let source = DirSource::open(root).and_then(|s| match keys {
            Keys::Relative => Ok(s),
            Keys::FullPath => s.keyed_by_full_path(),
        });
        match source {
            // A folder that opens elsewhere than recorded (a link swapped in
            // for it) would key its files under another root.
            Ok(s) if s.root() == root => opened.push(s),
            Ok(s) => unavailable.push(format!(
                "{}: now leads to {}; not taken",
                root.display(),
                s.root().display()
            )),
            // The error names the folder.
            Err(e) => unavailable.push(format!("recorded folder {e}")),
        }
    }
    (opened, unavailable)
}

/// The line refusing to add `root` to data directory `data`.
fn refusal(data: &str, root: &Path, why: Refused) -> CliError {
    let root = root.display();
    CliError::Config(match why {
        Refused::Http(url) => format!(
            "{data} belongs to the HTTP source {url}; folders and an HTTP source do not \
             share a data directory: use another --data for {root}"
        ),
        Refused::Inside(held) => format!(
            "{root} is inside {}, which {data} indexes already: its files are indexed with it",
            held.display()
        ),
        Refused::Holds(held) => format!(
            "{root} holds {}, which {data} indexes already: take that one out first \
             (`leasehold folders remove {}`) to index {root} whole",
            held.display(),
            held.display()
        ),
        Refused::NotUtf8 => {
            format!("{root}: a path that is not UTF-8 can only be a data directory's first folder")
        }
    })
}

/// Whether this data directory was listed from an HTTP source by a leasehold
/// that did not yet record its source: a listing's figures are there, and no
/// source is recorded. Today `source_url` is recorded before the first
/// listing, so this holds only for such older data directories.
fn listed_before_sources_were_recorded(store: &Store) -> Result<bool, CliError> {
    let record = Recorded::load(store)?;
    Ok(record.has_no_folder() && record.url.is_none() && ListingReport::load(store)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(relative: Option<&str>, full: &[&str]) -> Recorded {
        Recorded {
            relative: relative.map(PathBuf::from),
            full: full.iter().map(PathBuf::from).collect(),
            url: None,
        }
    }

    #[test]
    fn the_first_folder_is_keyed_relative_and_the_next_by_full_path() {
        let mut r = Recorded::default();
        assert_eq!(r.add(Path::new("/home/u/docs")), Ok(true));
        assert_eq!(r.add(Path::new("/home/u/notes")), Ok(true));
        assert_eq!(r.add(Path::new("/home/u/notes")), Ok(false));
        assert_eq!(r, record(Some("/home/u/docs"), &["/home/u/notes"]));
        assert_eq!(
            r.key_of(Path::new("/home/u/docs/a/b.txt")).as_deref(),
            Some("a/b.txt")
        );
        let key = r.key_of(Path::new("/home/u/notes/n.txt")).unwrap();
        assert_eq!(key, "/home/u/notes/n.txt");
        assert_eq!(r.path_of(&key), Some(PathBuf::from("/home/u/notes/n.txt")));
        assert_eq!(r.path_of("a/b.txt"), Some(PathBuf::from("/home/u/docs/a/b.txt")));
        assert_eq!(r.path_of("/elsewhere/x"), None);
        assert_eq!(r.key_of(Path::new("/home/u/notes2/x")), None);
    }

    #[test]
    fn nested_folders_and_folders_beside_an_http_source_are_refused() {
        let mut r = record(Some("/home/u/docs"), &["/srv/notes"]);
        assert_eq!(
            r.add(Path::new("/home/u/docs/sub")),
            Err(Refused::Inside("/home/u/docs".into()))
        );
        assert_eq!(r.add(Path::new("/srv")), Err(Refused::Holds("/srv/notes".into())));
        // A sibling whose name starts like a folder's is not inside it.
        assert_eq!(r.add(Path::new("/home/u/docs2")), Ok(true));
        let mut http = Recorded {
            url: Some("https://x/api".into()),
            ..Recorded::default()
        };
        assert_eq!(
            http.add(Path::new("/a")),
            Err(Refused::Http("https://x/api".into()))
        );
    }

    #[test]
    fn the_record_round_trips_through_its_settings() {
        let r = record(None, &["/a", "/b c"]);
        let mut values = vec![Some("old".into()), None, Some("u".into())];
        r.to_settings(&mut values);
        assert_eq!(values[0], None);
        assert_eq!(values[2].as_deref(), Some("u"));
        let back = Recorded::from_settings(&values).unwrap();
        assert_eq!((back.relative, back.full), (None, r.full));
        let mut removed = record(Some("/a"), &["/b"]);
        assert_eq!(removed.remove(Path::new("/a")), Some(Keys::Relative));
        assert_eq!(removed.remove(Path::new("/a")), None);
        assert!(Recorded::from_settings(&[None, Some("{".into()), None]).is_err());
    }
}
