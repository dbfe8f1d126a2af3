//! From flags to built objects: the store is opened, the mirror checked, the
//! folders recorded and opened, before any work starts. Every failure here is a
//! configuration error (exit 2) naming the thing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::config::{format_size, ExtractConfig, FileConfig};
use leasehold::mirror::{Fencing, Mirror};
use leasehold::pipeline::{Pipeline, PoolOptions};
use leasehold::source::{DirSource, Folders, Source};
use leasehold::store::{DbLocation, OutboxCap};
use leasehold::upstream::HttpClient;
use leasehold::upstream::{Gate, HttpSource, Sink};
use leasehold::{Store, StoreOptions, Synchronous};
use leasehold_extract::{
    CommandExtractor, Extractor, ExtractorRegistry, IsolatedExtractor, Limits, Ocr, OcrExtractor,
};

use super::args::{Global, Sync, WorkFlags, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_INPUT};
use super::error::CliError;
use super::folders::{self, Recorded, FOLDER_SETTINGS, SOURCE_URL};

/// Everything a command needs, opened and validated.
pub struct Config {
    pub store: Store,
    pub mirror: Mirror,
    /// Every recorded folder that could be opened: documents are read from
    /// the one their key belongs to.
    pub folders: Folders,
    /// The folders this command scans (`run`, `discover`, `watch`): the ones
    /// named on its command line, or every recorded one when none is.
    pub scanned: Vec<DirSource>,
    /// Where the data directory's documents come from, as it records it.
    pub recorded: Recorded,
    pub workers: usize,
    /// Most documents a worker claims at once ([`PoolOptions::claim_ahead`]).
    pub claim_ahead: usize,
    pub max_input: u64,
    /// How documents are extracted: in child processes under these limits,
    /// or (`--in-process`) in this one.
    pub extract: Extraction,
    /// The configuration file's parts, when there is one.
    pub upstream: Option<Upstream>,
    /// The data directory as the user named it (`--data`, or `--db` when
    /// given), for messages.
    data_name: String,
    /// The extractor made ahead ([`Config::prepare_extractor`]), for the
    /// next [`Config::pipeline`] to take.
    prepared: Mutex<Option<Result<Arc<dyn Extractor>, CliError>>>,
}

/// Where parsers run and the limits of one document: the configuration
/// file's `[extract]`, overridden by flags.
#[derive(Debug, Clone)]
pub struct Extraction {
    pub isolated: bool,
    pub limits: Limits,
    /// External converters by extension: `[extract.commands]`. The legacy
    /// Office tools on `PATH` join them when the extractor is made
    /// ([`installed_converters`]), as OCR does.
    pub commands: BTreeMap<String, Vec<String>>,
    /// `[extract] ocr_languages`: OCR is looked up when the extractor is made
    /// ([`installed_ocr`]), so that commands that extract nothing never start
    /// tesseract nor refuse a language it lacks.
    pub ocr_languages: Option<Vec<String>>,
}

/// Legacy Office formats, read as Recoll reads them: through the tools of the
/// antiword and catdoc packages, when they are installed and the configuration
/// names no command of its own for the extension. Each extension's choices in
/// order (catdoc when antiword is missing); all write UTF-8 text.
const LEGACY_OFFICE: [(&str, &[&[&str]]); 3] = [
    (
        "doc",
        &[
            &["antiword", "-m", "UTF-8.txt", "{}"],
            &["catdoc", "-d", "utf-8", "{}"],
        ],
    ),
    ("xls", &[&["xls2csv", "-d", "utf-8", "{}"]]),
    ("ppt", &[&["catppt", "-d", "utf-8", "{}"]]),
];

/// OCR through tesseract when it is on `PATH`, in `configured` languages (else
/// English, else the first language installed), drawing PDF pages with poppler's
/// pdftoppm when that is on `PATH` too. A configured language that is not
/// installed is refused; an empty list turns OCR off.
fn installed_ocr(configured: Option<&[String]>, limits: &Limits) -> Result<Option<Ocr>, CliError> {
    if configured.is_some_and(|l| l.is_empty()) || !on_path(TESSERACT) {
        return Ok(None);
    }
    let pdftoppm = on_path(PDFTOPPM).then(|| PDFTOPPM.to_owned());
    // None configured: tesseract is asked for its languages only when a
    // document first needs OCR (a run that reads no picture never starts it).
    let Some(wanted) = configured else {
        return Ok(Some(Ocr::choosing(
            TESSERACT.to_owned(),
            pdftoppm,
            limits.clone(),
            announce_ocr,
        )));
    };
    // Configured: checked now, so that a missing language is refused at once.
    let installed = match Ocr::installed_languages(TESSERACT) {
        Ok(installed) => installed,
        Err(e) => {
            announce_ocr(Err(&format!("tesseract cannot list its languages: {e}")));
            return Ok(None);
        }
    };
    if let Some(missing) = wanted.iter().find(|l| !installed.contains(l)) {
        return Err(CliError::Config(format!(
            "[extract] ocr_languages: tesseract has no {missing} (it has: {}); install its language pack, e.g. tesseract-ocr-{missing}",
            installed.join(", ")
        )));
    }
    announce_ocr(Ok(wanted));
    Ok(Some(Ocr::new(
        TESSERACT.to_owned(),
        pdftoppm,
        wanted.to_vec(),
        limits.clone(),
    )))
}

/// The languages OCR reads in (or why it reads none), said once: at start
/// when configured, else when a document first needed OCR.
fn announce_ocr(chosen: Result<&[String], &str>) {
    match chosen {
        Ok(languages) => {
            tracing::info!(target: super::logs::TARGET, event = "ocr", languages = languages.join("+").as_str(), "OCR through tesseract")
        }
        Err(why) => tracing::warn!("no OCR: {why}"),
    }
}

/// The OCR program, and poppler's program that draws a PDF page for it.
const TESSERACT: &str = "tesseract";
const PDFTOPPM: &str = "pdftoppm";

/// For each legacy Office extension `configured` leaves out, its tools found on
/// `PATH`, in [`LEGACY_OFFICE`]'s order (the first reads, the second is tried
/// when the first fails).
fn installed_converters(configured: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, Vec<Vec<String>>> {
    LEGACY_OFFICE
        .iter()
        .filter(|(ext, _)| !configured.contains_key(*ext))
        .map(|(ext, choices)| {
            let found = choices.iter().filter(|argv| on_path(argv[0]));
            let found = found.map(|argv| argv.iter().map(|a| a.to_string()).collect());
            (ext.to_string(), found.collect::<Vec<Vec<String>>>())
        })
        .filter(|(_, found)| !found.is_empty())
        .collect()
}

/// Whether `program` is an executable file in one of `PATH`'s directories
/// (with `.exe` on Windows), as the converter's `Command` will look it up.
fn on_path(program: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        let file = dir.join(program);
        is_executable(&file) || (cfg!(windows) && file.with_extension("exe").is_file())
    })
}

#[cfg(unix)]
fn is_executable(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(file: &Path) -> bool {
    file.is_file()
}

impl Extraction {
    /// The flags over the file's `[extract]` (at `file_path`), checked to fit
    /// together: an input limit the extraction memory cannot hold is refused.
    fn build(
        w: &WorkFlags,
        file: Option<&FileConfig>,
        file_path: Option<&Path>,
    ) -> Result<Extraction, CliError> {
        let f = file.map(|f| f.extract.clone()).unwrap_or_default();
        let memory = w.extract_memory.unwrap_or(f.memory);
        let max_input = match w.input.max_input {
            Some(given) => checked_input_limit(given, memory, || memory_origin(w, &f, file_path))?,
            None => default_input_limit(memory),
        };
        let limits = Limits {
            deadline: w.extract_timeout.unwrap_or(f.timeout),
            deadline_per_mib: w.extract_timeout_per_mib.unwrap_or(f.timeout_per_mib),
            memory_bytes: memory,
            cpu_time: w.extract_cpu.unwrap_or(f.cpu),
            cpu_time_per_mib: w.extract_cpu_per_mib.unwrap_or(f.cpu_per_mib),
            max_output_bytes: w.max_text.unwrap_or(f.max_text),
            max_input_bytes: max_input,
            ..Limits::default()
        };
        Ok(Extraction {
            // Children need unix (extract::isolated): elsewhere in-process.
            isolated: f.isolation && !w.in_process && cfg!(unix),
            commands: f.commands,
            ocr_languages: f.ocr_languages,
            limits,
        })
    }

    /// The extractor: the configured converters for their extensions, and the
    /// built-in registry for the rest, in supervised children of this very
    /// binary unless `--in-process`.
    fn extractor(&self) -> Result<Arc<dyn Extractor>, CliError> {
        let mut built_in = self.built_in()?;
        if let Some(ocr) = installed_ocr(self.ocr_languages.as_deref(), &self.limits)? {
            built_in = Arc::new(OcrExtractor::new(ocr, built_in));
        }
        // Each legacy Office extension's first tool reads it, OLE files only;
        // its second, where there is one, is tried when the first fails.
        let installed = installed_converters(&self.commands);
        if self.commands.is_empty() && installed.is_empty() {
            return Ok(built_in);
        }
        let compound_only: Vec<String> = installed.keys().cloned().collect();
        let mut commands = self.commands.clone();
        let mut second = BTreeMap::new();
        for (ext, mut found) in installed {
            if found.len() > 1 {
                second.insert(ext.clone(), found.remove(1));
            }
            commands.insert(ext, found.swap_remove(0));
        }
        Ok(Arc::new(
            CommandExtractor::new(commands, self.limits.clone(), built_in)
                .compound_files_only(compound_only)
                .second_tries(second),
        ))
    }

    fn built_in(&self) -> Result<Arc<dyn Extractor>, CliError> {
        if !self.isolated {
            return Ok(Arc::new(ExtractorRegistry::new(self.limits.max_input_bytes)));
        }
        let program = std::env::current_exe().map_err(|e| {
            CliError::Config(format!(
                "cannot find this program to run extraction children: {e}"
            ))
        })?;
        Ok(Arc::new(IsolatedExtractor::new(program, self.limits.clone())))
    }
}

/// What the configuration file adds: the shared gate, and the HTTP source and
/// sink when configured.
pub struct Upstream {
    pub file: FileConfig,
    pub gate: Arc<Gate>,
    pub http_source: Option<Arc<HttpSource>>,
    pub sink: Option<Arc<Sink>>,
}

/// Time allowed for one upstream request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

impl Config {
    /// A working command starts: the settings in force, as the flags, the
    /// configuration file and the defaults made them.
    pub fn log_started(&self, command: &'static str) {
        let limits = &self.extract.limits;
        let source = self.recorded_sources().join(", ");
        // Strings, not `Display`s: the text format then escapes what they hold.
        let database = self.store.path().display().to_string();
        let mirror = self.mirror.root().display().to_string();
        tracing::info!(
            target: super::logs::TARGET,
            event = "started",
            command,
            data = self.data_name(),
            database = database.as_str(),
            mirror = mirror.as_str(),
            source = leasehold::secret::redact(&source).as_str(),
            workers = self.workers,
            claim_ahead = self.claim_ahead,
            lease_ms = leasehold::clock::duration_ms(self.store.options().lease),
            max_input = limits.max_input_bytes,
            extract_memory = limits.memory_bytes,
            extract_timeout_ms = leasehold::clock::duration_ms(limits.deadline),
            extract_timeout_per_mib_ms = leasehold::clock::duration_ms(limits.deadline_per_mib),
            extract_cpu_ms = leasehold::clock::duration_ms(limits.cpu_time),
            extract_cpu_per_mib_ms = leasehold::clock::duration_ms(limits.cpu_time_per_mib),
            max_text = limits.max_output_bytes,
            isolated = self.extract.isolated,
            "{command} started"
        );
    }

    /// The data directory as the user named it (`--data`, or `--db` when
    /// given; a PostgreSQL database by its URL without the password).
    pub fn data_name(&self) -> &str {
        &self.data_name
    }

    /// The sources this data directory indexes, as `status` shows them: its
    /// folders, or the recorded HTTP base URL.
    pub fn recorded_sources(&self) -> Vec<String> {
        let folders = self.recorded.folders().into_iter();
        let mut shown: Vec<String> = folders.map(|(root, _)| root.display().to_string()).collect();
        shown.extend(self.recorded.url.clone());
        shown
    }

    /// Open everything. `source` is the folders given on the command line
    /// of a command that scans (`run`, `discover`, `watch`: recorded first,
    /// then scanned; none given scans every recorded one), with whether
    /// hidden files are taken; other commands read the folders recorded in
    /// the database. `work` holds the work flags of the commands that take
    /// them (empty, i.e. the defaults, for the others).
    pub fn build(
        g: &Global,
        work: &WorkFlags,
        source: Option<(&[PathBuf], bool)>,
    ) -> Result<Config, CliError> {
        Config::build_opening(g, work, source, |root| Mirror::open(root), None, FileUse::Needed)
    }

    /// [`Config::build`] with the mirror opened by `open_mirror`: created and
    /// proved writable for the commands that write results, only located for
    /// the ones that read them.
    fn build_opening(
        g: &Global,
        work: &WorkFlags,
        source: Option<(&[PathBuf], bool)>,
        open_mirror: fn(&Path) -> Result<Mirror, leasehold::mirror::MirrorError>,
        existing: Option<Existing>,
        file_use: FileUse,
    ) -> Result<Config, CliError> {
        let lease = work.lease.unwrap_or(DEFAULT_LEASE);
        if lease < Duration::from_millis(100) {
            return Err(CliError::Config(format!(
                "--lease {}: must be at least 100ms",
                humantime::format_duration(lease)
            )));
        }
        check_counts(work)?;
        let file = match (load_file_config(g), file_use) {
            (Ok(file), _) => file,
            (Err(e), FileUse::Needed) => return Err(e),
            (Err(e), FileUse::ReadsOnly) => {
                eprintln!("leasehold: warning: {e}; ignored by this command, which only reads");
                None
            }
        };
        let extract = Extraction::build(work, file.as_ref(), file_config_path(g).as_deref())?;
        let db = database(g, file.as_ref());
        if let Some(needs) = existing {
            if let Some(line) = missing_data(g, &db, needs) {
                return Err(CliError::Config(line));
            }
        }
        let mirror_root = mirror_root(g);
        create_data_dir(g)?;
        // Commands that read an existing store never create one.
        let mut options = store_options(work, lease).create_if_missing(existing.is_none());
        options.tokenizer = tokenizer_at_creation(work, file.as_ref(), &db, existing.is_none());
        options.stemming = stemming_asked(work, file.as_ref(), &db, existing.is_none());
        if let Some(f) = &file {
            options.outbox = OutboxCap {
                max_age_ms: leasehold::clock::duration_ms(f.outbox.max_age),
                max_bytes: f.outbox.max_bytes,
            };
            if let Some(keep) = f.store.history_keep {
                options = options.history_keep(keep);
            }
            if let Some(skew) = f.store.clock_skew {
                options = options.clock_skew(skew);
            }
        }
        let reading = existing.is_some_and(|e| e.only_reads());
        let store = open_store(&db, options, reading)?;
        let upstream = file.map(|f| Upstream::build(&store, f));
        let mut mirror = open_mirror(&mirror_root).map_err(|e| CliError::Config(e.to_string()))?;
        if store.locks_rows() {
            // Machines may share the mirror; its cleanup is fenced by row locks.
            mirror = mirror.fenced_by(Fencing::RowLocks);
        }
        // The store's own name for a PostgreSQL database has no password.
        let data_name = match (&db, &g.db) {
            (DbLocation::Postgres(_) | DbLocation::Unsupported(_), _) => store.path().display().to_string(),
            (DbLocation::Sqlite(path), Some(_)) => path.display().to_string(),
            (DbLocation::Sqlite(_), None) => g.data.display().to_string(),
        };
        let named = match source {
            Some((dirs, _)) if !dirs.is_empty() => Some(folders::add(&store, &data_name, dirs)?),
            _ => None,
        };
        let recorded = Recorded::load(&store)?;
        // Reading needs the record only (a file's path for its key, a
        // key's location): the folders are not opened, so a copy of a data
        // directory read where its folders are not (a backup, another
        // machine), or a folder on a mount that does not answer, costs a
        // search nothing.
        let originals = existing.is_some_and(|e| e.reads_originals());
        let (opened, unavailable) = match reading && !originals {
            true => Default::default(),
            false => folders::open(&recorded),
        };
        for line in &unavailable {
            eprintln!("leasehold: warning: {line}; its documents are left as they are");
        }
        let hidden = source.is_some_and(|(_, hidden)| hidden);
        let opened: Vec<DirSource> = opened
            .into_iter()
            .map(|s| without_own_files(s.include_hidden(hidden), g, &db, &mirror))
            .collect();
        let scanned = match &named {
            Some(roots) => opened
                .iter()
                .filter(|s| roots.iter().any(|r| r == s.root()))
                .cloned()
                .collect(),
            None if source.is_some() => opened.clone(),
            None => Vec::new(),
        };
        if source.is_some() && scanned.is_empty() {
            return Err(CliError::Config(no_folder_line(&data_name, &recorded)));
        }
        Ok(Config {
            store,
            mirror,
            // A document of a folder not open here (unmounted, or added by
            // another process since this one started) waits, attempts kept.
            folders: Folders::new(opened)
                .waiting_by(super::testing::clock().unwrap_or_else(|| Arc::new(leasehold::SystemClock))),
            scanned,
            recorded,
            workers: work.workers.unwrap_or(PoolOptions::default().workers),
            claim_ahead: work.claim_ahead.unwrap_or(PoolOptions::default().claim_ahead),
            max_input: extract.limits.max_input_bytes,
            extract,
            upstream,
            data_name,
            prepared: Mutex::new(None),
        })
    }

    /// The configured HTTP source, recorded as this data directory's source;
    /// refused when the data directory belongs to a source directory or to
    /// another base URL. `None` without `[source.http]`.
    pub fn http_source(&self) -> Result<Option<Arc<HttpSource>>, CliError> {
        let Some(up) = &self.upstream else {
            return Ok(None);
        };
        let (Some(http), Some(configured)) = (&up.http_source, &up.file.source_http) else {
            return Ok(None);
        };
        let url = recorded_url(&configured.base_url);
        let (kind, held) = self
            .store
            .meta_set_once_among(SOURCE_URL, &url, &FOLDER_SETTINGS)?;
        let data = &self.data_name;
        if kind != SOURCE_URL {
            let record = Recorded::load(&self.store)?;
            let folders = record.folders().into_iter();
            let held: Vec<String> = folders.map(|(root, _)| root.display().to_string()).collect();
            return Err(CliError::Config(format!(
                "{data} belongs to the source directory {}, not the HTTP source {url}; \
                 use another --data for {url}",
                held.join(", ")
            )));
        }
        if held != url {
            return Err(CliError::Config(format!(
                "{data} belongs to the HTTP source {held}, not {url}; its keys mean nothing \
                 to another source: index {url} into a new data directory (--data), \
                 or put base_url back"
            )));
        }
        Ok(Some(Arc::clone(http)))
    }

    /// Scan every folder this command opened (`discover` without a folder,
    /// once it knows there is no HTTP source to list), hidden files too
    /// when `hidden`.
    pub fn scan_every_folder(&mut self, hidden: bool) -> Result<(), CliError> {
        self.scanned = self
            .folders
            .iter()
            .map(|s| s.clone().include_hidden(hidden))
            .collect();
        match self.scanned.is_empty() {
            true => Err(CliError::Config(no_folder_line(&self.data_name, &self.recorded))),
            false => Ok(()),
        }
    }

    /// Whether the configuration file names an HTTP source.
    pub fn http_configured(&self) -> bool {
        self.upstream.as_ref().is_some_and(|u| u.http_source.is_some())
    }

    /// Refuse, as [`Config::pipeline`] would, a data directory whose source
    /// cannot be worked (none recorded, or another than the configured one).
    pub fn check_source(&self) -> Result<(), CliError> {
        self.document_source().map(drop)
    }

    /// Where documents come from: the directory given or pinned, else the HTTP
    /// source of the configuration file.
    fn document_source(&self) -> Result<Arc<dyn Source>, CliError> {
        if !self.folders.is_empty() {
            return Ok(Arc::new(self.folders.clone()));
        }
        if !self.recorded.has_no_folder() {
            return Err(CliError::Config(format!(
                "{}: none of its folders can be opened ({}); mount them again, or \
                 take them out (`leasehold folders remove DIR`)",
                self.data_name,
                self.recorded_sources().join(", ")
            )));
        }
        if let Some(http) = self.http_source()? {
            return Ok(http);
        }
        if let Some(url) = self.store.meta(SOURCE_URL)? {
            return Err(CliError::Config(format!(
                "{} belongs to the HTTP source {url}; give the configuration file \
                 that names it (--config)",
                self.data_name
            )));
        }
        Err(CliError::Config(format!(
            "{}: no source directory recorded yet and no [source.http] configured; \
             run `leasehold discover DIR` first",
            self.store.path().display()
        )))
    }

    /// Make the extractor now, for the next [`Config::pipeline`]: making it
    /// runs `tesseract` to list its languages (~17 ms in all), which `run` does on
    /// a thread beside its discovery rather than after it. An error is kept
    /// and given where it was before, when the pool starts.
    pub fn prepare_extractor(&self) {
        let made = self.make_extractor();
        *self.prepared.lock().unwrap_or_else(|e| e.into_inner()) = Some(made);
    }

    /// The extractor a worker pool uses (a test's stand-in, when one is set).
    fn make_extractor(&self) -> Result<Arc<dyn Extractor>, CliError> {
        match super::testing::extractor().map_err(CliError::Config)? {
            Some(test_extractor) => Ok(test_extractor),
            None => self.extract.extractor(),
        }
    }

    /// The pipeline for a worker pool; needs a source.
    pub fn pipeline(&self) -> Result<Pipeline, CliError> {
        let source = self.document_source()?;
        let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(Pipeline {
            store: self.store.clone(),
            mirror: self.mirror.clone(),
            source,
            extractor: match prepared {
                Some(made) => made?,
                None => self.make_extractor()?,
            },
            max_input_bytes: self.max_input,
            deliver_results: self.upstream.as_ref().is_some_and(|u| u.sink.is_some()),
        })
    }
}

impl Upstream {
    fn build(store: &Store, file: FileConfig) -> Upstream {
        let holder = format!(
            "pid{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let gate = Arc::new(Gate::new(store, &file, holder));
        let client = HttpClient::new(HTTP_TIMEOUT);
        let http_source = file
            .source_http
            .as_ref()
            .map(|c| Arc::new(HttpSource::new(c, Arc::clone(&gate), client.clone())));
        let sink = file
            .sink_http
            .as_ref()
            .map(|c| Arc::new(Sink::new(c, Arc::clone(&gate), client.clone())));
        Upstream {
            file,
            gate,
            http_source,
            sink,
        }
    }
}

/// The counts among the work flags, each at least 1 and at most what a pool
/// runs ([`PoolOptions::MAX_WORKERS`], [`PoolOptions::MAX_CLAIM_AHEAD`]).
fn check_counts(work: &WorkFlags) -> Result<(), CliError> {
    let between = |flag: &str, n: Option<usize>, max: usize, why: &str| match n {
        Some(0) => Err(CliError::Config(format!("--{flag} 0: must be at least 1"))),
        Some(n) if n > max => Err(CliError::Config(format!("--{flag} {n}: at most {max} ({why})"))),
        _ => Ok(()),
    };
    between(
        "workers",
        work.workers,
        PoolOptions::MAX_WORKERS,
        "each worker is a set of threads and an extraction process; more only wait for each other on one machine",
    )?;
    between(
        "claim-ahead",
        work.claim_ahead,
        PoolOptions::MAX_CLAIM_AHEAD,
        "a worker holds the documents it claimed ahead in memory",
    )?;
    if work.max_attempts == Some(0) {
        return Err(CliError::Config("--max-attempts 0: must be at least 1".into()));
    }
    Ok(())
}

/// The configuration file in use: `--config PATH`, or `DATA/leasehold.toml`
/// when it exists.
pub(super) fn file_config_path(g: &Global) -> Option<PathBuf> {
    match &g.config {
        Some(p) => Some(p.clone()),
        None => Some(g.data.join("leasehold.toml")).filter(|p| p.exists()),
    }
}

/// The configuration file ([`file_config_path`]), read and validated.
pub(super) fn load_file_config(g: &Global) -> Result<Option<FileConfig>, CliError> {
    let Some(path) = file_config_path(g) else {
        return Ok(None);
    };
    FileConfig::load(&path)
        .map(Some)
        .map_err(|e| CliError::Config(e.to_string().replace('\n', " ")))
}

/// Creates the data directory (only) when it holds the database or the mirror.
fn create_data_dir(g: &Global) -> Result<(), CliError> {
    if uses_data_dir(g) && !g.data.exists() {
        create_private_dir(&g.data).map_err(|e| {
            CliError::Config(format!("{}: cannot create data directory: {e}", g.data.display()))
        })?;
    }
    Ok(())
}

/// The database: `--db` (or `LEASEHOLD_DB`), else the configuration file's
/// `[store] db`, else `DATA/leasehold.db`. A `postgres://` URL is PostgreSQL.
pub(super) fn database(g: &Global, file: Option<&FileConfig>) -> DbLocation {
    if let Some(db) = &g.db {
        return DbLocation::of(db);
    }
    file.and_then(|f| f.store.location())
        .unwrap_or_else(|| DbLocation::Sqlite(g.data.join("leasehold.db")))
}

/// The mirror root: `--mirror`, else `DATA/mirror`. Creates nothing.
pub(super) fn mirror_root(g: &Global) -> PathBuf {
    g.mirror.clone().unwrap_or_else(|| g.data.join("mirror"))
}

/// Whether the data directory holds the database, the configuration or the
/// mirror (one of them is not given by its own flag).
fn uses_data_dir(g: &Global) -> bool {
    g.db.is_none() || g.mirror.is_none()
}

/// Create the data directory owner-only (0700 whatever the umask): it holds
/// the queue, the outbox and the mirror, all private text. Parents it creates
/// get the same mode; an existing directory is left as its owner made it.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    leasehold::portable::dir_builder(0o700)
        .recursive(true)
        .create(dir)?;
    leasehold::portable::set_path_mode(dir, 0o700)
}

/// The extraction memory an input limit needs per byte of input: the child
/// holds its copy of the document and what the parser builds from it (a tree,
/// a decompressed stream, the text), seldom smaller than the document; and
/// the parent reads the whole input before handing it over, so the rule also
/// bounds what one worker holds. A limit past it accepts files whose only
/// outcome is a memory failure after the parent has read them whole.
const MEMORY_PER_INPUT_BYTE: u64 = 2;

/// The input limit when `--max-input` is not given: its default, or half the
/// extraction memory when that is smaller (a small `[extract] memory` brings
/// the default down with it instead of refusing a flag nobody gave).
fn default_input_limit(memory: u64) -> u64 {
    DEFAULT_MAX_INPUT.min(memory / MEMORY_PER_INPUT_BYTE).max(1)
}

/// `--max-input given`, if the extraction memory can hold it; else one line
/// naming both limits (`memory_origin` says where the memory came from) and
/// what would work.
fn checked_input_limit(given: u64, memory: u64, memory_origin: impl Fn() -> String) -> Result<u64, CliError> {
    let most = memory / MEMORY_PER_INPUT_BYTE;
    if given <= most {
        return Ok(given);
    }
    let raise = match given.checked_mul(MEMORY_PER_INPUT_BYTE) {
        Some(needed) => format!(
            ", or raise the extraction memory to {} (--extract-memory, or [extract] memory)",
            format_size(needed)
        ),
        None => String::new(),
    };
    Err(CliError::Config(format!(
        "--max-input {} is more than half the extraction memory limit ({}): an extraction \
         holds the document and what its parser makes of it; use --max-input {} or less{raise}",
        format_size(given),
        memory_origin(),
        format_size(most.max(1)),
    )))
}

/// Where the extraction memory limit came from, with its value, for messages.
fn memory_origin(w: &WorkFlags, f: &ExtractConfig, file_path: Option<&Path>) -> String {
    let memory = format_size(w.extract_memory.unwrap_or(f.memory));
    match (w.extract_memory, file_path) {
        (Some(_), _) => format!("--extract-memory {memory}"),
        (None, Some(path)) if f.memory != Limits::DEFAULT_MEMORY_BYTES => {
            format!("[extract] memory = \"{memory}\" in {}", path.display())
        }
        (None, _) => format!("the default --extract-memory {memory}"),
    }
}

/// The tokenizer the store is asked for: `--tokenizer` or the configuration's
/// `[search] tokenizer` ([`asked_when_working`]; a store with text made with
/// another one refuses it). A PostgreSQL database has its one configuration.
fn tokenizer_at_creation(
    w: &WorkFlags,
    file: Option<&FileConfig>,
    db: &DbLocation,
    creating: bool,
) -> Option<leasehold::Tokenizer> {
    let given = w.search.tokenizer.map(|t| t.tokenizer());
    let given = given.or(file.and_then(|f| f.search.tokenizer));
    asked_when_working(creating, db, given, leasehold::Tokenizer::Unicode61)
}

/// The stemming the store is asked to record: `--stemming` or the
/// configuration's `[search] stemming` ([`asked_when_working`]).
fn stemming_asked(
    w: &WorkFlags,
    file: Option<&FileConfig>,
    db: &DbLocation,
    creating: bool,
) -> Option<leasehold::Stemming> {
    let given = w.search.stemming.map(|s| s.stemming());
    let given = given.or(file.and_then(|f| f.search.stemming));
    asked_when_working(creating, db, given, leasehold::Stemming::English)
}

/// A search setting a command asks of the store: only a command that works
/// (one that may create the store) asks; it asks for what was `given`, else,
/// for a SQLite file about to be made, `default`, so that the data directory
/// records it from the start. Commands that only read ask for nothing: they
/// search with what the data directory records.
fn asked_when_working<T>(creating: bool, db: &DbLocation, given: Option<T>, default: T) -> Option<T> {
    if !creating {
        return None;
    }
    let new_file = matches!(db, DbLocation::Sqlite(path) if !path.exists());
    given.or(new_file.then_some(default))
}

fn store_options(w: &WorkFlags, lease: Duration) -> StoreOptions {
    let options = match super::testing::clock() {
        Some(clock) => StoreOptions::default().clock(clock),
        None => StoreOptions::default(),
    };
    options
        .lease(lease)
        .max_attempts(w.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS))
        .synchronous(match w.synchronous.unwrap_or(Sync::Normal) {
            Sync::Normal => Synchronous::Normal,
            Sync::Full => Synchronous::Full,
        })
}

/// The line for a command that scans when there is no folder to scan.
fn no_folder_line(data: &str, recorded: &Recorded) -> String {
    match &recorded.url {
        Some(url) => format!("{data} belongs to the HTTP source {url}; give a folder to another --data"),
        None if recorded.has_no_folder() => {
            format!("{data} indexes no folder yet: `leasehold run DIR` indexes one")
        }
        None => format!(
            "{data}: none of its folders can be opened; mount them again, or take them out \
             (`leasehold folders remove DIR`)"
        ),
    }
}

/// Where one original is.
pub enum Location {
    Path(PathBuf),
    Url(String),
}

impl Recorded {
    /// Where the original of document `key` is: its path in its folder,
    /// its URL for an HTTP source, None when nothing recorded holds it.
    pub fn location(&self, key: &str) -> Option<Location> {
        if let Some(base) = &self.url {
            return leasehold::upstream::document_url(base, key).map(Location::Url);
        }
        self.path_of(key).map(Location::Path)
    }
}

/// A base URL as recorded and compared: `https://x/api/` and `https://x/api`
/// name the same endpoints (requests trim the trailing slash).
fn recorded_url(base_url: &str) -> String {
    base_url.trim_end_matches('/').to_owned()
}

/// What of an existing data directory a command uses: the database always,
/// the mirror for the commands that show or sweep results; and whether it
/// only reads them (then a read-only data directory is opened read-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// The database only, written (`auth unlock`, `retry`, `migrate`): a
    /// database whose mirror is elsewhere or not made yet (a library
    /// user's) is enough.
    Store,
    /// The database only, read (`auth status`, `metrics`, `report`).
    StoreToRead,
    /// The database and the mirror, read (`status`, `list`, `inspect`,
    /// `show`, `search`).
    StoreAndMirror,
    /// The database and the mirror, written (`reindex`).
    StoreAndMirrorToWrite,
    /// The database and the mirror, which the command sweeps (`gc`).
    MirrorToSweep,
    /// The database and the mirror, read, and the folders, whose originals
    /// it serves (`serve`).
    ServingToRead,
    /// As [`Existing::ServingToRead`], and the database written (`serve
    /// --allow-retry`).
    Serving,
}

impl Existing {
    /// Whether the command only reads, and may open a read-only data
    /// directory read-only.
    fn only_reads(self) -> bool {
        matches!(
            self,
            Existing::StoreToRead | Existing::StoreAndMirror | Existing::ServingToRead
        )
    }

    /// Whether the command reads originals, so the folders are opened.
    fn reads_originals(self) -> bool {
        matches!(self, Existing::ServingToRead | Existing::Serving)
    }

    /// Whether the command needs the mirror to be there.
    fn needs_mirror(self) -> bool {
        !matches!(self, Existing::Store | Existing::StoreToRead)
    }
}

/// Open the store; for a command that only reads, a read-only one (its file,
/// directory or medium) is opened read-only instead of refused, with a note
/// when it had to be opened immutable (commits only in its `-wal` unseen).
fn open_store(db: &DbLocation, options: StoreOptions, reading: bool) -> Result<Store, CliError> {
    let store = match Store::open(db, options.clone()) {
        Err(leasehold::Error::ReadOnly { .. }) if reading => Store::open(db, options.read_only(true))?,
        opened => opened?,
    };
    if let Some(note) = immutable_note(&store) {
        eprintln!("leasehold: note: {note}");
    }
    Ok(store)
}

/// The note for a store opened immutable: what it cannot see.
pub(super) fn immutable_note(store: &Store) -> Option<String> {
    if store.access() != leasehold::store::Access::Immutable {
        return None;
    }
    let db = store.path().display();
    let mut wal = store.path().as_os_str().to_owned();
    wal.push("-wal");
    let unseen = match std::fs::metadata(&wal).map(|m| m.len()) {
        Ok(n) if n > 0 => {
            format!("; its -wal ({n} bytes) cannot be read, so the newest changes may be missing")
        }
        _ => String::new(),
    };
    Some(format!(
        "{db}: opened immutable (a read-only medium without -wal and -shm files to share){unseen}"
    ))
}

impl Config {
    /// Open an existing data directory for a command that only reads (`status`,
    /// `list`, `inspect`, `show`, `auth status`) or works on what is already
    /// there (`gc`, `retry`, `auth unlock`). Unlike [`Config::build`] it
    /// creates no data directory and no database: a missing one (or a missing
    /// mirror, for [`Existing::StoreAndMirror`]) is a configuration error
    /// (exit 2) naming it, so a typo in `--data` is not answered with empty
    /// counts and a new, empty data directory.
    pub fn build_existing(
        g: &Global,
        work: &WorkFlags,
        needs: Existing,
        file_use: FileUse,
    ) -> Result<Config, CliError> {
        if let Some(line) = missing_data_directory(g) {
            return Err(CliError::Config(line));
        }
        // Only `gc` writes the mirror; the others must not create or probe it.
        let open_mirror = match needs {
            Existing::MirrorToSweep => |root: &Path| Mirror::open(root),
            _ => |root: &Path| Mirror::locate(root),
        };
        Config::build_opening(g, work, None, open_mirror, Some(needs), file_use)
    }
}

/// Whether a command can go on when the configuration file cannot be read
/// or is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileUse {
    /// It works, changes the store or talks to an upstream: it stops with
    /// one line naming the file and the error (exit 2).
    Needed,
    /// It only reads the store and the mirror (`status`, `list`, `inspect`,
    /// `show`, `search`, `metrics`, `report`): a broken file must not keep an
    /// operator from looking, so it warns, naming the file and the error, and
    /// goes on without it (the database at its default place).
    ReadsOnly,
}

/// The data directory, as one line, if the command would use it and it does
/// not exist (a typo in `--data` must not look like an empty store).
pub(super) fn missing_data_directory(g: &Global) -> Option<String> {
    (uses_data_dir(g) && !g.data.is_dir()).then(|| {
        format!(
            "{}: no such data directory (wrong --data? `leasehold run DIR` creates one)",
            g.data.display()
        )
    })
}

/// What of an existing data directory (checked first, by `build_existing`)
/// is missing, as one line, if anything. A PostgreSQL database is not looked
/// for here: opening it without creating says whether it is there.
fn missing_data(g: &Global, db: &DbLocation, needs: Existing) -> Option<String> {
    let mirror = mirror_root(g);
    if let DbLocation::Sqlite(db) = db {
        if !db.is_file() {
            return Some(format!(
                "{}: no database here (wrong --data or --db?)",
                db.display()
            ));
        }
    }
    if needs.needs_mirror() && !mirror.is_dir() {
        return Some(format!(
            "{}: no mirror here (wrong --data or --mirror?)",
            mirror.display()
        ));
    }
    None
}

/// The source without leasehold's own files, for when the data directory, the
/// database, the mirror or the configuration file lie inside it.
fn without_own_files(source: DirSource, g: &Global, db: &DbLocation, mirror: &Mirror) -> DirSource {
    let mut source = source.exclude_dir(mirror.root());
    if let DbLocation::Sqlite(db) = db {
        source = source.exclude_file_family(db);
    }
    if uses_data_dir(g) {
        source = source.exclude_dir(&g.data);
    }
    if let Some(config) = &g.config {
        source = source.exclude_file_family(config);
    }
    source
}
