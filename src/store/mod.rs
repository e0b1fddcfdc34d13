//! The run database: SQLite in WAL mode, with versioned migrations.
//!
//! One file holds every recorded run: its tunables and providers (secrets
//! removed), what replay needs beyond them ([`RunMeta`]), its events in
//! compact form ([`events`]) with any recorded bodies compressed beside
//! them, the client's own scheduling lag while it ran (`lag`), what the
//! recorder could not keep, and its report once it completes. The default file is in the platform data directory
//! ([`Store::default_path`]).
//!
//! Opening never damages a file it cannot use: a file that is not a
//! stallscope database, is corrupt, is read-only or was written by a newer
//! schema is refused with one [`StoreError`] naming the path, before
//! anything is written to it.
//!
//! Crash safety: the recorder commits batches (WAL, `synchronous=NORMAL`: a
//! commit survives a process crash; an OS crash may lose the last commits
//! but never corrupts the file). A run records the process that writes it
//! ([`std::process::id`] and, on Linux, that process's start time); each
//! open marks `interrupted` every `running` run whose process is gone (see
//! [`Store::mark_interrupted`]).

pub mod events;
mod lag;
pub mod migrations;
mod report;
pub mod runs;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::core::event::{Event, StreamId};
use crate::core::lag_probe::LagSample;
use crate::diagnosis::{DeniedBy, Diagnosis, RecordedRun};
use crate::report::RunReport;

/// How long an open or a write waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub use migrations::SCHEMA_VERSION;
pub use runs::{Outcomes, RunId, RunMeta, RunRecord, RunStart, RunStatus, RunSummary, redacted_providers};

/// A stream whose outcome differs between two runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeChange {
    /// The stream.
    pub stream: StreamId,
    /// Its outcome in the first run (`-`: the run has no such stream).
    pub a: String,
    /// Its outcome in the second run.
    pub b: String,
    /// It failed, in one of the runs, because the fleet retry budget — a
    /// limit all of its run's calls to a provider share — refused its
    /// retry: which call is refused depends on which retried first, so the
    /// change may be chance (see [`OutcomeChange::FLEET_NOTE`]).
    pub fleet_refused: bool,
}

impl OutcomeChange {
    /// What a change the fleet budget decided is marked with.
    pub const FLEET_MARK: &str = "fleet budget";
    /// What that mark means.
    pub const FLEET_NOTE: &str = "refused by the fleet retry budget, which the calls of a run share: which call it \
                                  refuses depends on which retried first, so the streams named may differ by chance";
}

/// Why the run database cannot be used. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory for the database cannot be created.
    #[error("cannot create the directory {} for the run database: {source}", .dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file or its directory cannot be written.
    #[error(
        "cannot write the run database {}: {reason}; choose a writable location (--db PATH) or record nothing (--no-record)",
        .path.display()
    )]
    ReadOnly {
        /// The database file.
        path: PathBuf,
        /// What SQLite or the system said.
        reason: String,
    },
    /// The disk holding the database has no room left.
    #[error(
        "cannot write the run database {}: the disk is full ({free} free); free some space, choose another location (--db PATH) or record nothing (--no-record)",
        .path.display()
    )]
    DiskFull {
        /// The database file.
        path: PathBuf,
        /// The room left on its disk, as said to a person.
        free: String,
    },
    /// The file is not a SQLite database, or is damaged.
    #[error(
        "{} is not a readable stallscope run database ({reason}); it was left untouched: move it aside or choose another file (--db PATH)",
        .path.display()
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        reason: String,
    },
    /// The file is another program's SQLite database.
    #[error(
        "{} is a SQLite database of another program, not a stallscope run database; it was left untouched: choose another file (--db PATH)",
        .path.display()
    )]
    NotOurs {
        /// The database file.
        path: PathBuf,
    },
    /// The file was written by a newer stallscope.
    #[error(
        "{} was written by a newer stallscope (schema version {found}; this version understands up to {supported}); it was left untouched: use a newer stallscope or choose another file (--db PATH)",
        .path.display()
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest this build knows.
        supported: i64,
    },
    /// Another process held the database locked for longer than the busy timeout.
    #[error("the run database {} stayed locked by another process for more than 5 s", .path.display())]
    Busy {
        /// The database file.
        path: PathBuf,
    },
    /// Any other SQLite failure.
    #[error("run database {}: {source}", .path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A migration failed.
    #[error("run database {}: cannot upgrade the schema: {source}", .path.display())]
    Migration {
        /// The database file.
        path: PathBuf,
        /// Why.
        source: rusqlite_migration::Error,
    },
    /// No run has this id.
    #[error("run database {}: there is no run {run}", .path.display())]
    NoSuchRun {
        /// The database file.
        path: PathBuf,
        /// The id asked for.
        run: RunId,
    },
    /// Stored data cannot be read back.
    #[error("run database {}: run {run}: {what}", .path.display())]
    Format {
        /// The database file.
        path: PathBuf,
        /// The run.
        run: RunId,
        /// What is wrong.
        what: String,
    },
    /// The recorder's writer thread cannot be started.
    #[error("cannot start the recorder for run database {}: {source}", .path.display())]
    Thread {
        /// The database file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The recorder's writer thread is gone (it panicked).
    #[error("the recorder for run database {} has stopped", .path.display())]
    WriterGone {
        /// The database file.
        path: PathBuf,
    },
}

impl StoreError {
    /// Classifies a SQLite failure on `path`.
    fn sqlite(path: &Path, e: rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        let reason = e.to_string();
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt { path, reason },
            Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => StoreError::ReadOnly { path, reason },
            Some(ErrorCode::CannotOpen) => {
                let reason = if path.is_dir() {
                    "it is a directory".to_owned()
                } else {
                    format!("{reason} (is the location writable?)")
                };
                StoreError::ReadOnly { path, reason }
            }
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy { path },
            // SQLite says "disk full" for some writes and a plain I/O error
            // for others (the WAL's shared memory on a full tmpfs): the
            // disk's own free space tells them apart.
            Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => match room_left(&path) {
                Some(free) if free < FULL_BELOW => StoreError::DiskFull { path, free: format!("{} KiB", free / 1024) },
                _ => StoreError::Sqlite { path, source: e },
            },
            _ => StoreError::Sqlite { path, source: e },
        }
    }
}

/// A disk with less room than this is full for a database: a page, its
/// WAL frame and the shared-memory index do not fit.
const FULL_BELOW: u64 = 1024 * 1024;

/// The room an unprivileged writer has left on the disk holding `path`
/// (`None` where that cannot be read).
fn room_left(path: &Path) -> Option<u64> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let stats = rustix::fs::statvfs(dir).ok()?;
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// What the recorder could not keep, counted since the run began.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Drops {
    /// Events not recorded, bodies included.
    pub(crate) events: u64,
    /// Bodies not recorded.
    pub(crate) bodies: u64,
    /// Events not recorded per stream (may list only the streams whose
    /// count changed since the last write).
    pub(crate) by_stream: Vec<(StreamId, u64)>,
}

/// The run database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

/// The process that owns this store's runs, as recorded in `runs.pid`.
struct Process {
    pid: i64,
    start: Option<i64>,
}

impl Process {
    fn current() -> Self {
        let pid = i64::from(std::process::id());
        Process { pid, start: process_start(pid).and_then(|(_, start)| start) }
    }
}

/// A process's state letter and start time (clock ticks since boot), from
/// Linux's `/proc/<pid>/stat`; `None` when there is no such process (or no
/// procfs).
fn process_start(pid: i64) -> Option<(char, Option<i64>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields that follow start after its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
    // Field 3 is the state, so field 22 (starttime) is the 20th here.
    let start = fields.nth(18).and_then(|s| s.parse().ok());
    Some((state, start))
}

/// Whether the process that recorded a run still runs. Linux only: a
/// process is alive while `/proc/<pid>` exists, is not a zombie, and
/// started when the run's row says (a reused pid is another process).
/// Without procfs only this process's own runs count as alive.
fn recorder_alive(pid: Option<i64>, start: Option<i64>, me: &Process) -> bool {
    let Some(pid) = pid else { return false };
    if pid == me.pid && start == me.start {
        return true;
    }
    match process_start(pid) {
        Some((state, now)) => !matches!(state, 'Z' | 'X' | 'x') && (start.is_none() || now.is_none() || start == now),
        None => false,
    }
}

impl Store {
    /// The default database: `stallscope/stallscope.db` in the platform data
    /// directory (`~/.local/share` on Linux); `None` without a home directory.
    pub fn default_path() -> Option<PathBuf> {
        directories::ProjectDirs::from("", "", "stallscope").map(|dirs| dirs.data_dir().join("stallscope.db"))
    }

    /// Opens (creating it and its directory if needed) the database at
    /// `path`, migrates it to the current schema and marks the runs of dead
    /// processes interrupted.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { dir: dir.to_path_buf(), source })?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // SQLite answers "busy" at once, without waiting, where waiting
        // could deadlock (processes setting up one new file together, each
        // holding a lock the other needs). Every step of opening is safe
        // to repeat, so a busy open starts over until the busy timeout.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            let conn = Connection::open_with_flags(&path, flags).map_err(|e| StoreError::sqlite(&path, e))?;
            match Self::init(conn, path.clone()) {
                Err(StoreError::Busy { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                opened => return opened,
            }
        }
    }

    /// A database in memory (tests, what-if scratch space).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| StoreError::sqlite(&path, e))?;
        Self::init(conn, path)
    }

    fn init(mut conn: Connection, path: PathBuf) -> Result<Store, StoreError> {
        // Checking a file and migrating it is not atomic: two opens of a new
        // file (the app starts a recorder per scenario at once) would both
        // see it empty and both create the schema. Opens in this process
        // take turns; another process's migration is found below.
        static OPENING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = OPENING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let err = |e| StoreError::sqlite(&path, e);
        // Waits for a concurrent writer (the recorder of another run) instead of failing at once.
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        if conn.is_readonly(rusqlite::MAIN_DB).map_err(err)? {
            return Err(StoreError::ReadOnly { path, reason: "the file is read-only".to_owned() });
        }
        // Nothing is written before the file is known to be ours and not
        // newer. Read in one snapshot: another process creating the schema
        // meanwhile must not be seen half done (tables, but no id yet).
        let (version, app, tables) = (|| -> rusqlite::Result<(i64, i64, i64)> {
            let snapshot = conn.unchecked_transaction()?;
            let version: i64 = snapshot.pragma_query_value(None, "user_version", |r| r.get(0))?;
            let app: i64 = snapshot.pragma_query_value(None, "application_id", |r| r.get(0))?;
            let tables: i64 = snapshot.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
            snapshot.commit()?;
            Ok((version, app, tables))
        })()
        .map_err(err)?;
        if app != migrations::APPLICATION_ID && (app != 0 || version != 0 || tables != 0) {
            return Err(StoreError::NotOurs { path });
        }
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew { path, found: version, supported: SCHEMA_VERSION });
        }
        // PRAGMAs outside migrations: `journal_mode` is a no-op inside a transaction.
        // WAL: readers (history, the GUI) never block the recorder, and a crash
        // mid-commit leaves the database as of the last commit.
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(StoreError::ReadOnly { path, reason: format!("cannot switch to WAL (journal mode {mode})") });
        }
        // NORMAL is durable against process crashes in WAL mode and skips an
        // fsync per commit; an OS crash may lose the last commits, never integrity.
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(err)?;
        // Migrations take the write lock at once: a deferred one that read
        // first could deadlock with another process's, and one of the two
        // would fail instead of waiting.
        conn.set_transaction_behavior(TransactionBehavior::Immediate);
        let migrated = migrations::MIGRATIONS.to_latest(&mut conn);
        conn.set_transaction_behavior(TransactionBehavior::Deferred);
        if let Err(e) = migrated {
            // Another process may have migrated the file between our check
            // and our migration (two opens of a new file at once: a run
            // starting while its history is read); ours rolled back, and
            // the schema is there now.
            let now: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(err)?;
            if now != SCHEMA_VERSION {
                return Err(match e {
                    rusqlite_migration::Error::RusqliteError { err: source, .. } => StoreError::sqlite(&path, source),
                    source => StoreError::Migration { path: path.clone(), source },
                });
            }
        }
        let mut store = Store { conn, path };
        store.mark_interrupted()?;
        Ok(store)
    }

    /// The database file (`:memory:` for an in-memory store).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        StoreError::sqlite(&self.path, e)
    }

    fn read_err(&self, run: RunId, e: events::ReadError) -> StoreError {
        match e {
            events::ReadError::Sql(e) => self.err(e),
            events::ReadError::Format(what) => StoreError::Format { path: self.path.clone(), run, what },
        }
    }

    /// Starts a run, owned by this process, and returns its id.
    pub fn begin_run(&mut self, start: &RunStart) -> Result<RunId, StoreError> {
        let me = Process::current();
        runs::insert(&self.conn, start, me.pid, me.start).map_err(|e| self.err(e))
    }

    /// Appends a batch of a run's events in one transaction.
    pub fn append_events(&mut self, run: RunId, events: &[Event]) -> Result<(), StoreError> {
        self.append(run, events, &[], None)
    }

    /// Appends readings of a run's own scheduling lag in one transaction.
    pub fn append_runtime_lag(&mut self, run: RunId, samples: &[LagSample]) -> Result<(), StoreError> {
        self.append(run, &[], samples, None)
    }

    /// Appends a batch of events and lag readings and, when given, sets the
    /// run's drop counts in the same transaction (the recorder keeps them
    /// current so a crash still shows how many events were lost).
    pub(crate) fn append(
        &mut self,
        run: RunId,
        events: &[Event],
        lag: &[LagSample],
        drops: Option<&Drops>,
    ) -> Result<(), StoreError> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let result = (|| {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let exists = tx.query_row("SELECT 1 FROM runs WHERE id = ?1", [run], |_| Ok(())).optional()?;
            if exists.is_none() {
                return Ok(0);
            }
            events::write(&tx, run, events)?;
            lag::write(&tx, run, lag)?;
            let changed = tx.execute(
                "UPDATE runs SET events = events + ?2, dropped_events = max(dropped_events, coalesce(?3, 0)), \
                 dropped_bodies = max(dropped_bodies, coalesce(?4, 0)) WHERE id = ?1",
                rusqlite::params![
                    run,
                    events.len() as i64,
                    drops.map(|d| count(d.events)),
                    drops.map(|d| count(d.bodies))
                ],
            )?;
            let mut per_stream = tx.prepare_cached(
                "INSERT INTO streams (run_id, stream, dropped_events) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (run_id, stream) DO UPDATE SET \
                 dropped_events = max(streams.dropped_events, excluded.dropped_events)",
            )?;
            for (stream, dropped) in drops.map_or(&[][..], |d| &d.by_stream) {
                per_stream.execute(rusqlite::params![run, *stream as i64, count(*dropped)])?;
            }
            drop(per_stream);
            tx.commit()?;
            Ok(changed)
        })();
        match result {
            Ok(0) => Err(StoreError::NoSuchRun { path: self.path.clone(), run }),
            Ok(_) => Ok(()),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Completes a run: stores `report` (with `run_id` set to `run`) and the
    /// number of events that were not recorded.
    pub fn finish_run(&mut self, run: RunId, report: &RunReport, dropped: u64) -> Result<(), StoreError> {
        let result = (|| {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let found = runs::finish(&tx, run, report, dropped)?;
            tx.commit()?;
            Ok(found)
        })();
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err(StoreError::NoSuchRun { path: self.path.clone(), run }),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Marks `interrupted` every `running` run whose recording process is
    /// gone, and returns their ids. Called by [`Store::open`].
    ///
    /// The rule (Linux): a run belongs to the process id and start time it
    /// recorded; it is alive while `/proc/<pid>` exists, is not a zombie and
    /// has that start time. Runs of this process are always alive. Without
    /// procfs, runs of other processes count as gone; a run wrongly marked
    /// so still completes normally when its recorder finishes.
    pub fn mark_interrupted(&mut self) -> Result<Vec<RunId>, StoreError> {
        let me = Process::current();
        let dead: Vec<RunId> = runs::running(&self.conn)
            .map_err(|e| self.err(e))?
            .into_iter()
            .filter(|(_, pid, start)| !recorder_alive(*pid, *start, &me))
            .map(|(id, _, _)| id)
            .collect();
        if dead.is_empty() {
            return Ok(dead);
        }
        let result = (|| {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for id in &dead {
                runs::interrupt(&tx, *id)?;
            }
            tx.commit()
        })();
        result.map_err(|e| self.err(e))?;
        Ok(dead)
    }

    /// Every run, newest first.
    pub fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        runs::summaries(&self.conn, None).map_err(|e| self.err(e))
    }

    /// One run's summary, tunables, providers, meta and drops per stream
    /// (for `runs show`, `runs compare` and replay).
    pub fn run(&self, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        runs::record(&self.conn, id).map_err(|e| self.err(e))
    }

    /// The report of a completed run, as `run --json` printed it, with
    /// `run_id` filled; `None` for an unknown or unfinished run. A report
    /// that counted its calls (an observer's) gets its streams from the
    /// recording: each one's outcome, target, attempts and wall-clock.
    pub fn run_report(&self, id: RunId) -> Result<Option<RunReport>, StoreError> {
        let Some(text) = self.run_report_json(id)? else { return Ok(None) };
        let mut report =
            report::decode(&text).map_err(|what| StoreError::Format { path: self.path.clone(), run: id, what })?;
        if report.counted.is_some() && report.streams.is_empty() {
            report.streams = runs::recorded_streams(&self.conn, id).map_err(|e| self.err(e))?;
        }
        Ok(Some(report))
    }

    /// The streams whose outcome differs between runs `a` and `b`, in
    /// stream order, `-` where a run has no such stream (or no report).
    /// For `runs compare` and the app's comparison alike.
    pub fn outcome_changes(&self, a: RunId, b: RunId) -> Result<Vec<OutcomeChange>, StoreError> {
        let outcomes = |id| -> Result<BTreeMap<StreamId, &'static str>, StoreError> {
            let report = self.run_report(id)?;
            Ok(report.map(|r| r.streams.iter().map(|s| (s.index, s.outcome)).collect()).unwrap_or_default())
        };
        let (oa, ob) = (outcomes(a)?, outcomes(b)?);
        let streams: BTreeSet<StreamId> = oa.keys().chain(ob.keys()).copied().collect();
        let changed: Vec<(StreamId, &str, &str)> = streams
            .into_iter()
            .map(|i| (i, oa.get(&i).copied().unwrap_or("-"), ob.get(&i).copied().unwrap_or("-")))
            .filter(|(_, x, y)| x != y)
            .collect();
        // Only the changed streams are diagnosed: which of them failed on
        // a limit their run's calls shared.
        let fleet_refused = |run, failed: Vec<StreamId>| -> Result<BTreeSet<StreamId>, StoreError> {
            let diagnoses = self.diagnoses(run, &failed)?;
            let refused = diagnoses.into_iter().filter(|(_, d)| d.basis.denied_by == Some(DeniedBy::FleetBudget));
            Ok(refused.map(|(stream, _)| stream).collect())
        };
        let failed_a = changed.iter().filter(|c| c.1 == "failed").map(|c| c.0).collect();
        let failed_b = changed.iter().filter(|c| c.2 == "failed").map(|c| c.0).collect();
        let (ra, rb) = (fleet_refused(a, failed_a)?, fleet_refused(b, failed_b)?);
        Ok(changed
            .into_iter()
            .map(|(stream, x, y)| OutcomeChange {
                stream,
                a: x.to_owned(),
                b: y.to_owned(),
                fleet_refused: ra.contains(&stream) || rb.contains(&stream),
            })
            .collect())
    }

    /// The stored report text (what `runs show --json` prints).
    pub fn run_report_json(&self, id: RunId) -> Result<Option<String>, StoreError> {
        runs::report_text(&self.conn, id).map_err(|e| self.err(e))
    }

    /// The report of a completed run with every stream's verdict computed
    /// from its stored events, so runs recorded before verdicts existed
    /// get them too (what `runs show` prints); `None` for an unknown or
    /// unfinished run.
    pub fn diagnosed_report(&self, id: RunId) -> Result<Option<RunReport>, StoreError> {
        let Some(mut report) = self.run_report(id)? else { return Ok(None) };
        let recorded = self.recorded_run(id)?;
        let counted = report.counted.is_some();
        let mut diagnoses = Vec::with_capacity(report.streams.len());
        for stream in &mut report.streams {
            let events = self.events(id, stream.index)?;
            // A run that counted its calls kept no report of each: what one
            // says of its bytes is read back from its events.
            if counted {
                stream.read_from(&events);
            }
            diagnoses.push((stream.index, recorded.diagnose(stream.index, &events)));
        }
        report.attach_diagnoses(diagnoses);
        Ok(Some(report))
    }

    /// The verdicts on `streams` of a run, from their stored events (see
    /// [`RecordedRun`]).
    pub fn diagnoses(&self, run: RunId, streams: &[StreamId]) -> Result<Vec<(StreamId, Diagnosis)>, StoreError> {
        let recorded = self.recorded_run(run)?;
        streams.iter().map(|&stream| Ok((stream, recorded.diagnose(stream, &self.events(run, stream)?)))).collect()
    }

    /// What a run's verdicts are read against: the limits it was recorded
    /// with and the events it lost per stream.
    pub fn recorded_run(&self, run: RunId) -> Result<RecordedRun, StoreError> {
        let record = self.run(run)?.ok_or_else(|| StoreError::NoSuchRun { path: self.path.clone(), run })?;
        Ok(RecordedRun::new(&record.tunables, &record.dropped_by_stream))
    }

    /// One stream's events in time order.
    pub fn events(&self, run: RunId, stream: StreamId) -> Result<Vec<Event>, StoreError> {
        events::read_stream(&self.conn, run, stream).map_err(|e| self.read_err(run, e))
    }

    /// Every event of a run in time order (for export).
    pub fn run_events(&self, run: RunId) -> Result<Vec<Event>, StoreError> {
        events::read_run(&self.conn, run).map_err(|e| self.read_err(run, e))
    }

    /// A run's own scheduling lag, one reading per period in time order
    /// (none for runs recorded before it was measured).
    pub fn runtime_lag(&self, run: RunId) -> Result<Vec<LagSample>, StoreError> {
        lag::read(&self.conn, run).map_err(|e| self.read_err(run, e))
    }

    /// The streams of a run that have events, in order.
    pub fn streams(&self, run: RunId) -> Result<Vec<StreamId>, StoreError> {
        let result = (|| -> rusqlite::Result<Vec<StreamId>> {
            let mut stmt =
                self.conn.prepare_cached("SELECT DISTINCT stream FROM events WHERE run_id = ?1 ORDER BY stream")?;
            stmt.query_map([run], |r| r.get::<_, i64>(0).map(|s| s as u64))?.collect()
        })();
        result.map_err(|e| self.err(e))
    }

    /// The runs labelled `label` that are no longer running, newest first:
    /// their ids and wall-clock starts (Unix milliseconds). A watch's
    /// retention reads its rounds this way.
    pub fn ended_with_label(&self, label: &str) -> Result<Vec<(RunId, i64)>, StoreError> {
        self.ended_runs(Some(label), i64::MIN)
    }

    /// The runs no longer running that started at or after `since_ms`
    /// (Unix milliseconds), labelled `label` when given, newest first:
    /// their ids and wall-clock starts. Tune reads a history this way.
    pub fn ended_runs(&self, label: Option<&str>, since_ms: i64) -> Result<Vec<(RunId, i64)>, StoreError> {
        runs::ended(&self.conn, label, since_ms).map_err(|e| self.err(e))
    }

    /// Deletes a run and everything recorded for it; false when there was none.
    pub fn delete_run(&mut self, id: RunId) -> Result<bool, StoreError> {
        // Foreign keys cascade to streams, attempts and events.
        let deleted = self.conn.execute("DELETE FROM runs WHERE id = ?1", [id]).map_err(|e| self.err(e))?;
        Ok(deleted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_missing_one_is_not() {
        let me = Process::current();
        assert!(recorder_alive(Some(me.pid), me.start, &me));
        assert!(!recorder_alive(Some(99_999_999), Some(1), &me));
        assert!(!recorder_alive(None, None, &me));
        if cfg!(target_os = "linux") {
            assert!(me.start.is_some());
            // The same pid with another start time is a reused pid.
            assert!(!recorder_alive(Some(me.pid), me.start.map(|s| s + 1), &me));
        }
    }

    #[test]
    fn a_fresh_store_has_the_current_schema() {
        let store = Store::open_in_memory().unwrap();
        let version: i64 = store.conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        assert!(store.list_runs().unwrap().is_empty());
    }
}
