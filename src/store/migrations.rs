//! The schema's versioned migrations (rusqlite_migration keeps the version
//! in SQLite's `user_version`).
//!
//! Database version changelog:
//! - 0: empty file, nothing created yet.
//! - 1: runs, streams, attempts and compact events (`sql/0001_init.sql`).
//! - 2: what replay needs (`sql/0002_replay.sql`): run meta (seed, wall
//!   clock, rules, pools) as JSON, the schema a run was recorded with,
//!   dropped bodies per run and dropped events per stream, how and when
//!   each attempt ended, and the `bodies` table.
//! - 3: the run's own scheduling lag, one reading per 100 ms
//!   (`sql/0003_runtime_lag.sql`).
//! - 4: runs the user stopped, their calls that never started, and the
//!   batch a run was started in (`sql/0004_console.sql`).
//!
//! Migrations only ever move forward. A database whose version is newer
//! than [`SCHEMA_VERSION`] was written by a newer stallscope and is refused
//! before anything is written to it (see [`super::Store::open`]).

use rusqlite_migration::{M, Migrations};

/// Every migration, in order: migration `i` takes the schema to version `i + 1`.
const STEPS: &[M<'static>] = &[
    M::up(include_str!("sql/0001_init.sql")),
    M::up(include_str!("sql/0002_replay.sql")),
    M::up(include_str!("sql/0003_runtime_lag.sql")),
    M::up(include_str!("sql/0004_console.sql")),
];

/// The migrations, applied by [`super::Store::open`].
pub(crate) const MIGRATIONS: Migrations<'static> = Migrations::from_slice(STEPS);

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = STEPS.len() as i64;

/// SQLite's `application_id` of a stallscope database ("SSCP"), set by the
/// first migration: another program's database is never migrated.
pub const APPLICATION_ID: i64 = i64::from_be_bytes([0, 0, 0, 0, b'S', b'S', b'C', b'P']);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_validate() {
        assert!(MIGRATIONS.validate().is_ok());
    }

    #[test]
    fn the_first_migration_sets_our_application_id() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        MIGRATIONS.to_latest(&mut conn).unwrap();
        let id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!((id, version), (APPLICATION_ID, SCHEMA_VERSION));
    }
}
