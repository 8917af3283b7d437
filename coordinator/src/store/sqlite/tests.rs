//! The SQLite store's tests: round trips, migrations, group commit,
//! purges, nonces and reads.

use super::schema::MIGRATIONS;
use super::*;
use crate::config::Config;
use crate::core::Core;
use protocol::api::{JobStatus, Tier};
use rand::SeedableRng;
use x402::evm::{Address, Bytes32};

/// Changes from a real core: two jobs and a claimed pairing.
fn changes() -> Vec<Change> {
    let mut core = Core::new(
        Config::default(),
        rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    for user in ["a", "b"] {
        let s = crate::store::tests::task_submission(user);
        let payment = crate::core::Payment {
            payment_ref: "pay-1".into(),
            paid_with: crate::core::PaidWith {
                nonce: key(user.len() as u8),
                response_header: "e30=".into(),
                ticket: None,
            },
        };
        core.commit(s, Tier::Cheap, Some(payment), 1_000).unwrap();
    }
    let code = core.create_pairing("a", None, "ip", 1_000).unwrap().code;
    core.claim_pairing(&code, Ok("0xkey"), "ip", 1_001).unwrap();
    core.take_changes()
}

fn sorted(mut s: Snapshot) -> Snapshot {
    s.jobs.sort_by_key(|j| j.seq);
    s
}

fn expected(changes: &[Change]) -> Snapshot {
    let m = crate::store::MemoryStore::default();
    m.apply(changes).unwrap();
    sorted(m.load().unwrap())
}

/// The persisted fields (the in-memory `epoch` is not stored).
fn persisted(jobs: &[Job]) -> serde_json::Value {
    serde_json::to_value(jobs).unwrap()
}

fn assert_same(a: &Snapshot, b: &Snapshot) {
    assert_eq!(persisted(&a.jobs), persisted(&b.jobs));
    assert_eq!(a.pairings, b.pairings);
    assert_eq!(a.trust, b.trust);
}

#[test]
fn round_trip_in_memory() {
    let store = SqliteStore::open(":memory:").unwrap();
    assert_eq!(store.mode(), CommitMode::PerEvent);
    let changes = changes();
    store.apply(&changes).unwrap();
    let loaded = sorted(store.load().unwrap());
    assert_eq!(loaded.jobs.len(), 2);
    assert_eq!(loaded.jobs[0].payment_ref.as_deref(), Some("pay-1"));
    assert_eq!(loaded.jobs[0].status, JobStatus::Pending);
    assert_same(&loaded, &expected(&changes));
}

#[test]
fn later_versions_replace_earlier_ones() {
    let store = SqliteStore::open_in_memory().unwrap();
    let changes = changes();
    store.apply(&changes).unwrap();
    let Change::Job(job) = &changes[0] else {
        panic!("a job first")
    };
    let mut job = job.clone();
    let changed = Arc::make_mut(&mut job);
    changed.status = JobStatus::Failed;
    changed.deadline_ms = None;
    store.apply(&[Change::Job(job.clone())]).unwrap();
    let loaded = store.load().unwrap();
    assert_eq!(loaded.jobs.len(), 2);
    assert!(loaded
        .jobs
        .iter()
        .any(|j| persisted(std::slice::from_ref(j)) == persisted(&[(*job).clone()])));
}

#[test]
fn migrations_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    for _ in 0..3 {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len());
    }
    let conn = Connection::open(&path).unwrap();
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, MIGRATIONS.len());
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    drop(SqliteStore::open(&path).unwrap());
    Connection::open(&path)
        .unwrap()
        .execute("INSERT INTO schema_version (version) VALUES (99)", [])
        .unwrap();
    assert!(matches!(
        SqliteStore::open(&path),
        Err(SqliteError::SchemaTooNew { found: 99, .. })
    ));
}

#[tokio::test]
async fn group_commit_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let changes = changes();
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.mode(), CommitMode::Group);
        for change in &changes {
            store.apply(std::slice::from_ref(change)).unwrap();
        }
        store.flush().await.unwrap();
        // Read through a second connection: committed, not just buffered.
        let other = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
        assert_same(&sorted(other.load().unwrap()), &expected(&changes));
        std::mem::forget(store); // like a crash: no orderly close
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_same(&sorted(store.load().unwrap()), &expected(&changes));
    // And each job reads back by id: the row map was read at open.
    for job in jobs_in(&changes) {
        let read = store.job(&job.id).unwrap().expect("written before");
        assert_eq!(persisted(&[(*read).clone()]), persisted(&[(*job).clone()]));
    }
}

/// The writer thread is signalled only while it waits: an append after
/// each commit (the writer asleep again) must still wake it, every time,
/// and appends from several threads at once must all get committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_append_wakes_the_sleeping_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("w.db")).unwrap());
    let changes = changes();
    let within = std::time::Duration::from_secs(10);
    for _ in 0..50 {
        store.apply(&changes[..1]).unwrap();
        tokio::time::timeout(within, store.flush())
            .await
            .expect("the writer woke")
            .unwrap();
    }
    // Real threads: appends racing the writer is the point here.
    #[allow(clippy::disallowed_methods)]
    let appenders: Vec<_> = (0..4)
        .map(|_| {
            let (store, changes) = (store.clone(), changes.clone());
            std::thread::spawn(move || {
                for _ in 0..200 {
                    store.apply(&changes).unwrap();
                }
            })
        })
        .collect();
    for appender in appenders {
        appender.join().unwrap();
    }
    tokio::time::timeout(within, store.flush())
        .await
        .expect("the writer woke")
        .unwrap();
    assert_eq!(lock(&store.shared.durable).upto, 50 + 4 * 200);
}

#[test]
fn per_event_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let changes = changes();
    let store = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
    store.apply(&changes).unwrap();
    drop(store);
    let store = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
    assert_same(&sorted(store.load().unwrap()), &expected(&changes));
}

#[tokio::test]
async fn an_empty_apply_does_not_hold_up_flush() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
    store.apply(&[]).unwrap();
    store.flush().await.unwrap();
}

#[tokio::test]
async fn purge_deletes_old_terminal_jobs_only() {
    let store = SqliteStore::open_in_memory().unwrap();
    let changes = changes();
    store.apply(&changes).unwrap();
    let Change::Job(job) = &changes[0] else {
        panic!("a job first")
    };
    let mut done = job.clone();
    Arc::make_mut(&mut done).status = JobStatus::Completed;
    store.apply(&[Change::Job(done)]).unwrap();
    store.purge_jobs(vec![job.id]).unwrap();
    let loaded = store.load().unwrap();
    assert_eq!(loaded.jobs.len(), 1);
    assert_eq!(loaded.jobs[0].status, JobStatus::Pending);
}

#[tokio::test]
async fn group_purge_is_ordered_after_earlier_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
    let changes = changes();
    store.apply(&changes).unwrap();
    let Change::Job(job) = &changes[0] else {
        panic!("a job first")
    };
    let mut done = job.clone();
    Arc::make_mut(&mut done).status = JobStatus::Failed;
    store.apply(&[Change::Job(done)]).unwrap();
    store.purge_jobs(vec![job.id]).unwrap();
    store.flush().await.unwrap();
    let loaded = store.load().unwrap();
    assert_eq!(loaded.jobs.len(), 1);
    assert_eq!(loaded.jobs[0].status, JobStatus::Pending);
    assert_eq!(loaded.pairings.len(), 1);
}

#[tokio::test]
async fn a_failed_write_is_never_reported_durable() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        SqliteStore::open_in_memory().unwrap(),
        SqliteStore::open(dir.path().join("c.db")).unwrap(),
    ] {
        store.flush().await.unwrap();
        store
            .shared
            .conn()
            .execute_batch("DROP TABLE jobs")
            .unwrap();
        let applied = store.apply(&changes());
        assert_eq!(applied.is_err(), store.mode() == CommitMode::PerEvent);
        assert!(store.flush().await.is_err());
        // And it stays refused: later changes depend on the lost ones.
        let _ = store.apply(&changes()[..1]);
        assert!(store.flush().await.is_err());
    }
}

fn key(n: u8) -> NonceKey {
    NonceKey {
        chain_id: 84532,
        asset: Address([1; 20]),
        from: Address([2; 20]),
        nonce: Bytes32([n; 32]),
    }
}

#[test]
fn used_nonces_stay_used_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    {
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.check_and_mark(key(1), 100), Ok(()));
        assert_eq!(s.check_and_mark(key(1), 100), Err(NonceUsed));
        s.mark_spent(&key(1));
        s.release(&key(1));
        assert_eq!(s.check_and_mark(key(2), 100), Ok(()));
        assert_eq!(s.check_and_mark(key(3), 100), Ok(()));
        s.release(&key(3));
        std::mem::forget(s);
    }
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.state(&key(1)), Some(NonceState::Spent));
    assert_eq!(s.check_and_mark(key(1), 100), Err(NonceUsed));
    assert_eq!(s.state(&key(2)), Some(NonceState::Reserved));
    assert_eq!(s.state(&key(3)), None);
    s.purge_expired(101);
    assert_eq!(s.state(&key(1)), None);
}

/// A version of `job` with another status.
fn with_status(job: &Arc<Job>, status: JobStatus) -> Change {
    let mut job = job.clone();
    Arc::make_mut(&mut job).status = status;
    Change::Job(job)
}

fn job_rows(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
        .unwrap()
}

/// Rows are found by rowid, so the map must survive a restart: a later
/// version of a job written after reopening replaces its row, never
/// adds a second one (load would then give the job twice).
#[tokio::test]
async fn a_reopened_store_updates_the_rows_it_wrote_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let changes = changes();
    let Change::Job(job) = &changes[0] else {
        panic!("a job first")
    };
    SqliteStore::open(&path).unwrap().apply(&changes).unwrap();
    for status in [JobStatus::Assigned, JobStatus::Completed] {
        let store = SqliteStore::open(&path).unwrap();
        store.apply(&[with_status(job, status)]).unwrap();
        store.flush().await.unwrap();
    }
    assert_eq!(job_rows(&path), 2);
    let loaded = SqliteStore::open(&path).unwrap().load().unwrap();
    assert_eq!(loaded.jobs.len(), 2);
    let stored = loaded.jobs.iter().find(|j| j.id == job.id).unwrap();
    assert_eq!(stored.status, JobStatus::Completed);
}

/// A database written before schema step 2 (the id as primary key) is
/// carried over whole, and its jobs are then updated in place.
#[test]
fn step_two_carries_over_the_jobs_of_step_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let changes = changes();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL);
             INSERT INTO schema_version (version) VALUES (1);",
        )
        .unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        let mut stmt = conn
            .prepare(
                "INSERT INTO jobs (id, status, seq, deadline_ms, created_at_ms, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .unwrap();
        for change in &changes {
            if let Change::Job(j) = change {
                stmt.execute(params![
                    j.id.to_string(),
                    j.status.as_str(),
                    j.seq as i64,
                    j.deadline_ms,
                    j.created_at_ms,
                    serde_json::to_string(&**j).unwrap()
                ])
                .unwrap();
            }
        }
    }
    let store = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
    assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len());
    let jobs = |s: &SqliteStore| sorted(s.load().unwrap()).jobs;
    assert_eq!(
        persisted(&jobs(&store)),
        persisted(&expected(&changes).jobs)
    );
    let last = changes.iter().rev().find_map(|c| match c {
        Change::Job(j) => Some(j),
        _ => None,
    });
    let job = last.expect("jobs");
    store.apply(&[with_status(job, JobStatus::Failed)]).unwrap();
    assert_eq!(job_rows(&path), 2);
    let failed = jobs(&store).into_iter().find(|j| j.id == job.id).unwrap();
    assert_eq!(failed.status, JobStatus::Failed);
}

/// The rows a purge deletes leave the map; a failed transaction leaves
/// it as the database is.
#[test]
fn the_row_map_follows_committed_transactions_only() {
    let store = SqliteStore::open_in_memory().unwrap();
    let changes = changes();
    store.apply(&changes).unwrap();
    assert_eq!(store.shared.rows().len(), 2);
    let Change::Job(job) = &changes[0] else {
        panic!("a job first")
    };
    store
        .apply(&[with_status(job, JobStatus::Completed)])
        .unwrap();
    store.purge_jobs(vec![job.id]).unwrap();
    assert_eq!(store.shared.rows().len(), 1);
    // Written again after its purge (as the upsert did), it is a new row.
    store.apply(&[with_status(job, JobStatus::Failed)]).unwrap();
    assert_eq!(store.shared.rows().len(), 2);
    assert_eq!(store.load().unwrap().jobs.len(), 2);

    let store = SqliteStore::open_in_memory().unwrap();
    store
        .shared
        .conn()
        .execute_batch(
            "CREATE TRIGGER no_jobs BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'no'); END",
        )
        .unwrap();
    assert!(store.apply(&changes).is_err());
    assert_eq!(store.shared.rows().len(), 0);
}

/// The jobs in `changes`, latest version of each, in first-seen order.
fn jobs_in(changes: &[Change]) -> Vec<Arc<Job>> {
    let mut ids: Vec<Uuid> = Vec::new();
    for change in changes {
        if let Change::Job(job) = change {
            if !ids.contains(&job.id) {
                ids.push(job.id);
            }
        }
    }
    ids.iter()
        .filter_map(|id| latest_job(changes, id))
        .collect()
}

/// Waits (on the writer thread, which runs on its own) until `done`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("waited 10 s for {what}");
}

/// The simulation's database (`memdb`) is not WAL: its reads go through
/// the one connection, as the comment on `Shared::reader` says.
#[tokio::test]
async fn only_a_wal_database_gets_a_read_connection() {
    let memdb = SqliteStore::open_on("file:/store-job-memdb?vfs=memdb", WriterRuntime::Task);
    assert!(memdb.unwrap().shared.reader.is_none());
    assert!(SqliteStore::open_in_memory()
        .unwrap()
        .shared
        .reader
        .is_none());
    let dir = tempfile::tempdir().unwrap();
    let file = SqliteStore::open(dir.path().join("c.db")).unwrap();
    assert!(file.shared.reader.is_some());
}

/// A job read back from its row is what `load` gives back, for both
/// commit modes; an id never stored reads as `None`.
#[tokio::test]
async fn a_committed_job_reads_as_load_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        SqliteStore::open_in_memory().unwrap(),
        SqliteStore::open(dir.path().join("c.db")).unwrap(),
    ] {
        let changes = changes();
        store.apply(&changes).unwrap();
        store.flush().await.unwrap();
        {
            let pending = store.shared.pending();
            assert!(pending.changes.is_empty() && pending.committing.is_none());
        }
        let loaded = store.load().unwrap();
        assert_eq!(loaded.jobs.len(), 2);
        for (job, applied) in loaded.jobs.iter().zip(jobs_in(&changes)) {
            let read = store.job(&job.id).unwrap().expect("stored");
            assert!(!Arc::ptr_eq(&read, &applied), "decoded from its row");
            assert_eq!(
                persisted(std::slice::from_ref(&*read)),
                persisted(std::slice::from_ref(job))
            );
        }
        assert!(store.job(&Uuid::nil()).unwrap().is_none());
    }
}

/// No version is out of sight while the writer commits: the test holds
/// the writer's connection, so the writer takes the first batch and
/// waits with it; later versions stay pending. Reads find the batch
/// being committed, then the newest pending version, and never wait for
/// the writer's connection (they use the read connection).
#[tokio::test]
async fn versions_not_committed_yet_read_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
    assert!(store.shared.reader.is_some(), "a file is WAL");
    let changes = changes();
    let job = jobs_in(&changes).remove(0);
    let writer_conn = store.shared.conn();
    store.apply(&changes).unwrap();
    wait_for("the writer to take the batch", || {
        store.shared.pending().committing.is_some()
    });
    assert!(store.shared.pending().changes.is_empty());
    let read = store.job(&job.id).unwrap().expect("being committed");
    assert!(Arc::ptr_eq(&read, &job));

    let running = [JobStatus::Assigned, JobStatus::Running].map(|status| {
        let change = with_status(&job, status);
        store.apply(std::slice::from_ref(&change)).unwrap();
        change
    });
    let Change::Job(running) = &running[1] else {
        panic!("a job")
    };
    let read = store.job(&job.id).unwrap().expect("pending");
    assert!(Arc::ptr_eq(&read, running), "the latest version wins");

    drop(writer_conn);
    store.flush().await.unwrap();
    let read = store.job(&job.id).unwrap().expect("committed");
    assert!(!Arc::ptr_eq(&read, running));
    assert_eq!(read.status, JobStatus::Running);
}

/// A purge takes effect when its transaction commits: a version of a
/// job it deletes still reads until then, `None` afterwards.
#[tokio::test]
async fn a_purged_job_reads_as_none() {
    let changes = changes();
    let job = jobs_in(&changes).remove(0);
    let other = jobs_in(&changes).remove(1);
    let done = with_status(&job, JobStatus::Completed);

    let store = SqliteStore::open_in_memory().unwrap();
    store.apply(&changes).unwrap();
    store.apply(std::slice::from_ref(&done)).unwrap();
    assert!(store.job(&job.id).unwrap().is_some());
    store.purge_jobs(vec![job.id]).unwrap();
    assert!(store.job(&job.id).unwrap().is_none());
    assert!(store.job(&other.id).unwrap().is_some());

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
    let writer_conn = store.shared.conn();
    store.apply(&changes).unwrap();
    store.apply(std::slice::from_ref(&done)).unwrap();
    store.purge_jobs(vec![job.id]).unwrap();
    let read = store.job(&job.id).unwrap().expect("not purged yet");
    assert_eq!(read.status, JobStatus::Completed);
    drop(writer_conn);
    store.flush().await.unwrap();
    assert!(store.job(&job.id).unwrap().is_none());
    assert_eq!(store.job(&other.id).unwrap().expect("kept").id, other.id);
}

/// A store that can no longer make anything durable says so rather
/// than answer from memory that will never reach the disk.
#[tokio::test]
async fn a_halted_or_failed_store_answers_an_error() {
    let changes = changes();
    let id = jobs_in(&changes)[0].id;
    let store = SqliteStore::open_in_memory().unwrap();
    store.apply(&changes).unwrap();
    assert!(store.job(&id).unwrap().is_some());
    store.halt();
    assert!(store.job(&id).is_err());

    let store = SqliteStore::open_in_memory().unwrap();
    store.apply(&changes).unwrap();
    store
        .shared
        .conn()
        .execute_batch("DROP TABLE jobs")
        .unwrap();
    assert!(store.apply(&changes).is_err());
    assert!(store.job(&id).is_err());
}
