//! The run's own scheduling lag in the `runtime_lag` table: one row per
//! reading of the lag probe ([`crate::core::lag_probe`]), apart from the
//! events because it is about the client, not about any stream.

use std::time::Duration;

use rusqlite::{Connection, Transaction, params};

use crate::core::lag_probe::LagSample;

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Writes a batch of readings. A period read twice keeps its larger lag.
pub(crate) fn write(tx: &Transaction<'_>, run: i64, samples: &[LagSample]) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO runtime_lag (run_id, at_ns, lag_ns) VALUES (?1, ?2, ?3) \
         ON CONFLICT (run_id, at_ns) DO UPDATE SET lag_ns = max(lag_ns, excluded.lag_ns)",
    )?;
    for sample in samples {
        insert.execute(params![run, ns(sample.at), ns(sample.lag)])?;
    }
    Ok(())
}

/// A run's readings in time order; `Err` names a row that cannot be read.
pub(crate) fn read(conn: &Connection, run: i64) -> Result<Vec<LagSample>, super::events::ReadError> {
    let mut stmt = conn.prepare_cached("SELECT at_ns, lag_ns FROM runtime_lag WHERE run_id = ?1 ORDER BY at_ns")?;
    let mut rows = stmt.query([run])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let (at, lag): (i64, i64) = (row.get(0)?, row.get(1)?);
        let (Ok(at_ns), Ok(lag_ns)) = (u64::try_from(at), u64::try_from(lag)) else {
            let what = format!("runtime lag row at {at} ns has a negative time or lag ({lag} ns)");
            return Err(super::events::ReadError::Format(what));
        };
        out.push(LagSample { at: Duration::from_nanos(at_ns), lag: Duration::from_nanos(lag_ns) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{RunStart, Store};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn readings_come_back_in_time_order_keep_the_larger_lag_and_go_with_their_run() {
        let mut store = Store::open_in_memory().unwrap();
        let start = RunStart::new(None, None, &crate::tunables::Tunables::defaults(), &[]);
        let run = store.begin_run(&start).unwrap();
        let other = store.begin_run(&start).unwrap();
        let sample = |at, lag| LagSample { at: ms(at), lag: ms(lag) };
        store.append_runtime_lag(run, &[sample(200, 3), sample(0, 1)]).unwrap();
        store.append_runtime_lag(run, &[sample(200, 40), sample(100, 2)]).unwrap();
        store.append_runtime_lag(other, &[sample(0, 9)]).unwrap();
        assert_eq!(store.runtime_lag(run).unwrap(), [sample(0, 1), sample(100, 2), sample(200, 40)]);
        assert!(store.delete_run(run).unwrap());
        assert!(store.runtime_lag(run).unwrap().is_empty());
        assert_eq!(store.runtime_lag(other).unwrap(), [sample(0, 9)]);
    }
}
