//! Where document bytes come from (DESIGN §2 "source"): the [`Source`] trait
//! and its errors, and the local directory source ([`DirSource`]). The HTTP
//! source reads through the shared credential and lives with it, in
//! `upstream` (feature `http`).

mod contract;
mod dir;
mod folders;

pub use contract::{Source, SourceError};
pub use dir::{
    count_folder_documents, full_path_prefix, is_full_path_key, key_below_folder, key_for, key_in_folder,
    mark_folder_gone, relative_path_of, DirSource, Discovered, Original,
};
pub use folders::Folders;
