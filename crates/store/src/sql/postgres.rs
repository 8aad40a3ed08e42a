//! A cluster's database: Postgres, shared by every API replica and node.
//! A bounded pool of connections, each keeping its prepared
//! statements; the schema migrated under an advisory lock (two replicas
//! starting at once apply each migration once); transactions retried when
//! Postgres picked them as a deadlock's victim; changes told through
//! `LISTEN`/`NOTIFY`, so every replica's console hears every node's writes.
//! The client is `postgres`'s blocking one, which runs a runtime of its own
//! even to close a connection: connections are closed by `close` on the
//! caller's (blocking) thread, or, when the pool is dropped inside an async
//! runtime (a server's tasks end with it), on a thread of their own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, Config, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::row::{Cell, Row};
use super::{numbered_placeholders, Database, Dialect, Param, Sql, ToParam, Work};
use crate::error::{Result, StoreError};
use crate::migrations::{check_schema_version, POSTGRES_MIGRATIONS};

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database` (libpq's key=value
    /// form works too).
    pub url: String,
    /// The schema the tables live in (created if missing); `None`: the
    /// connection's default (`public`). Letters, digits and `_` only.
    pub schema: Option<String>,
    /// Connections open at most at once.
    pub pool_size: usize,
    /// A PEM file of the CA that signed the server's certificate, beside
    /// the host's trusted roots (a private CA's).
    pub ca_file: Option<std::path::PathBuf>,
}

/// How long a caller waits for a free connection before the request fails.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// Statements a connection keeps prepared (the store has about a hundred
/// distinct ones; the cache is emptied if dynamic ones pile up).
const STATEMENT_CACHE: usize = 256;

/// The advisory lock the migrations run under.
const MIGRATION_LOCK: i64 = 0x7368_656c_6c67;

/// The channel the `console_changes` trigger notifies.
const CHANGES_CHANNEL: &str = "shellgate_changes";

/// Attempts at a transaction Postgres aborted to break a deadlock.
const TRANSACTION_ATTEMPTS: usize = 5;

/// One connection and its prepared statements.
pub(crate) struct PgConnection {
    client: Client,
    statements: HashMap<String, Statement>,
}

impl PgConnection {
    fn statement(&mut self, sql: &str) -> Result<Statement> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        if self.statements.len() >= STATEMENT_CACHE {
            self.statements.clear();
        }
        let statement = self.client.prepare(&numbered_placeholders(sql))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

struct PoolState {
    idle: Vec<PgConnection>,
    open: usize,
}

/// The Postgres database.
pub(crate) struct PostgresDatabase {
    config: Config,
    tls: MakeRustlsConnect,
    schema: Option<String>,
    pool_size: usize,
    state: Mutex<PoolState>,
    freed: Condvar,
    /// Set when the database is closed or dropped: no connection is lent
    /// any more, and the change listener's thread ends.
    closed: Arc<AtomicBool>,
    /// The change listeners' threads, joined by `close`.
    listeners: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// A connection borrowed from the pool, given back when dropped (or
/// closed, if it broke).
struct Pooled<'a> {
    database: &'a PostgresDatabase,
    connection: Option<PgConnection>,
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let mut state = self.database.lock_state();
        let closed = self.database.closed.load(Ordering::SeqCst);
        let ended = match self.connection.take() {
            Some(connection) if !connection.client.is_closed() && !closed => {
                state.idle.push(connection);
                None
            }
            ended => {
                state.open = state.open.saturating_sub(1);
                ended
            }
        };
        drop(state);
        self.database.freed.notify_one();
        close_connections(ended.into_iter().collect());
    }
}

/// How long a thread that may not close connections itself waits for the
/// thread that does (a database that stopped answering cannot hold it).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Closes `connections` (each tells the server it leaves, and waits for
/// its socket to close). The blocking client does it on a runtime of its
/// own, which a thread inside an async runtime's context may not start
/// (a worker would panic): there, a thread of their own closes them, and
/// this one waits for it at most [`CLOSE_WAIT`].
fn close_connections(connections: Vec<PgConnection>) {
    if connections.is_empty() {
        return;
    }
    if tokio::runtime::Handle::try_current().is_err() {
        for connection in connections {
            // A connection that fails to say goodbye is gone all the same.
            let _ = connection.client.close();
        }
        return;
    }
    let (hand, take) = std::sync::mpsc::channel::<Vec<PgConnection>>();
    let (done, closed) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("store-close".into())
        .spawn(move || {
            if let Ok(connections) = take.recv() {
                close_connections(connections);
            }
            let _ = done.send(());
        });
    let handed = match spawned {
        Ok(_) => hand.send(connections).map_err(|unsent| unsent.0),
        Err(_) => Err(connections),
    };
    match handed {
        Ok(()) => {
            let _ = closed.recv_timeout(CLOSE_WAIT);
        }
        // No thread to close them on: dropped here they would panic this
        // runtime's thread, so their sockets are left to the process's end.
        Err(connections) => std::mem::forget(connections),
    }
}

fn valid_schema(schema: &str) -> bool {
    !schema.is_empty()
        && schema.len() <= 63
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit()
}

impl PostgresDatabase {
    /// Connects, creates the schema if asked for one, and migrates.
    pub(crate) fn open(options: &PostgresOptions) -> Result<Self> {
        let mut config: Config = options
            .url
            .parse()
            .map_err(|e: postgres::Error| StoreError::Config(format!("database URL: {e}")))?;
        if config.get_application_name().is_none() {
            config.application_name("shellgate");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if let Some(schema) = &options.schema {
            if !valid_schema(schema) {
                return Err(StoreError::Config(format!(
                    "database schema {schema:?}: lowercase letters, digits and _ only"
                )));
            }
        }
        let database = Self {
            config,
            tls: super::tls::connector(options.ca_file.as_deref())?,
            schema: options.schema.clone(),
            pool_size: options.pool_size.max(1),
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            closed: Arc::new(AtomicBool::new(false)),
            listeners: Mutex::new(Vec::new()),
        };
        database.migrate()?;
        Ok(database)
    }

    fn lock_state(&self) -> MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn connect(&self) -> Result<PgConnection> {
        let mut client = self.config.connect(self.tls.clone())?;
        if let Some(schema) = &self.schema {
            // The name was checked to be a plain identifier.
            client.batch_execute(&format!("SET search_path TO {schema}"))?;
        }
        Ok(PgConnection {
            client,
            statements: HashMap::new(),
        })
    }

    fn get(&self) -> Result<Pooled<'_>> {
        let mut state = self.lock_state();
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(StoreError::Closed);
            }
            if let Some(connection) = state.idle.pop() {
                return Ok(Pooled {
                    database: self,
                    connection: Some(connection),
                });
            }
            if state.open < self.pool_size {
                state.open += 1;
                drop(state);
                return match self.connect() {
                    Ok(connection) => Ok(Pooled {
                        database: self,
                        connection: Some(connection),
                    }),
                    Err(error) => {
                        self.lock_state().open -= 1;
                        self.freed.notify_one();
                        Err(error)
                    }
                };
            }
            let (next, waited) = self
                .freed
                .wait_timeout(state, POOL_WAIT)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            state = next;
            if waited.timed_out() && state.idle.is_empty() && state.open >= self.pool_size {
                return Err(StoreError::PoolExhausted(self.pool_size));
            }
        }
    }

    fn migrate(&self) -> Result<()> {
        let mut client = self.config.connect(self.tls.clone())?;
        client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])?;
        let result = (|| -> Result<()> {
            if let Some(schema) = &self.schema {
                client.batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path TO {schema}"
                ))?;
            }
            client.batch_execute(
                "CREATE TABLE IF NOT EXISTS shellgate_schema (version BIGINT NOT NULL);
                 INSERT INTO shellgate_schema (version)
                 SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM shellgate_schema)",
            )?;
            let version: i64 = client
                .query_one("SELECT version FROM shellgate_schema", &[])?
                .get(0);
            check_schema_version(version, POSTGRES_MIGRATIONS.len())?;
            for (index, migration) in POSTGRES_MIGRATIONS
                .iter()
                .enumerate()
                .skip(version.max(0) as usize)
            {
                let mut tx = client.transaction()?;
                tx.batch_execute(migration)?;
                tx.execute(
                    "UPDATE shellgate_schema SET version = $1",
                    &[&((index + 1) as i64)],
                )?;
                tx.commit()?;
            }
            Ok(())
        })();
        let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
        result?;
        unlocked?;
        Ok(())
    }

    /// Drops the schema and everything in it (tests).
    #[cfg(test)]
    pub(crate) fn drop_schema(&self) -> Result<()> {
        if let Some(schema) = &self.schema {
            let mut client = self.config.connect(self.tls.clone())?;
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))?;
        }
        Ok(())
    }
}

impl PostgresDatabase {
    /// Marks the database closed and hands back its idle connections.
    fn shut(&self) -> Vec<PgConnection> {
        self.closed.store(true, Ordering::SeqCst);
        let mut state = self.lock_state();
        let idle = std::mem::take(&mut state.idle);
        state.open = state.open.saturating_sub(idle.len());
        drop(state);
        // Callers waiting for a connection learn it is closed.
        self.freed.notify_all();
        idle
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        // Wherever the last owner let go (an async task ended by its
        // runtime's shutdown, say), the connections are closed safely.
        close_connections(self.shut());
    }
}

/// Whether Postgres aborted the transaction to break a deadlock or a
/// serialization conflict (running it again is the documented answer).
fn is_retryable(error: &StoreError) -> bool {
    let StoreError::Postgres(error) = error else {
        return false;
    };
    matches!(
        error.code(),
        Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
            | Some(&postgres::error::SqlState::T_R_SERIALIZATION_FAILURE)
    )
}

impl Database for PostgresDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn read(&self, work: Work<'_>) -> Result<()> {
        // One snapshot for all of the work's statements (a response's
        // length and its items, read while a save commits, agree).
        let mut pooled = self.get()?;
        let Some(connection) = pooled.connection.as_mut() else {
            return Err(StoreError::PoolExhausted(self.pool_size));
        };
        connection
            .client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        let result = work(connection);
        if connection.client.batch_execute("COMMIT").is_err() {
            pooled.connection = None;
        }
        result
    }

    fn write(&self, work: Work<'_>) -> Result<()> {
        let mut pooled = self.get()?;
        match pooled.connection.as_mut() {
            Some(connection) => work(connection),
            None => Err(StoreError::PoolExhausted(self.pool_size)),
        }
    }

    fn transaction(&self, work: Work<'_>) -> Result<()> {
        let mut pooled = self.get()?;
        let Some(connection) = pooled.connection.as_mut() else {
            return Err(StoreError::PoolExhausted(self.pool_size));
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            connection.client.batch_execute("BEGIN")?;
            let result =
                work(connection).and_then(|()| Ok(connection.client.batch_execute("COMMIT")?));
            match result {
                Ok(()) => return Ok(()),
                Err(error) => {
                    if connection.client.batch_execute("ROLLBACK").is_err() {
                        // A connection that cannot roll back is not given
                        // back to the pool.
                        pooled.connection = None;
                        return Err(error);
                    }
                    if attempt >= TRANSACTION_ATTEMPTS || !is_retryable(&error) {
                        return Err(error);
                    }
                }
            }
        }
    }

    fn on_change(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let (config, tls) = (self.config.clone(), self.tls.clone());
        let closed = Arc::clone(&self.closed);
        let spawned = std::thread::Builder::new()
            .name("store-changes".into())
            .spawn(move || listen_for_changes(config, tls, closed, wake));
        match spawned {
            Ok(listener) => self
                .listeners
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(listener),
            Err(error) => {
                tracing_free_warning(&format!("cannot start the change listener: {error}"))
            }
        }
    }

    fn close(&self) {
        close_connections(self.shut());
        // The listeners see the flag within their wait (a second) and close
        // their own connections as they end.
        let listeners = std::mem::take(
            &mut *self
                .listeners
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for listener in listeners {
            let _ = listener.join();
        }
    }
}

/// Holds a connection that listens on the changes channel and wakes the
/// reader on each notification, reconnecting (and waking once, since
/// changes may have been missed) when the connection breaks.
fn listen_for_changes(
    config: Config,
    tls: MakeRustlsConnect,
    closed: Arc<AtomicBool>,
    wake: Box<dyn Fn() + Send + Sync>,
) {
    while !closed.load(Ordering::Relaxed) {
        let listening = config.connect(tls.clone()).and_then(|mut client| {
            client.batch_execute(&format!("LISTEN {CHANGES_CHANNEL}"))?;
            Ok(client)
        });
        let mut client = match listening {
            Ok(client) => client,
            Err(error) => {
                tracing_free_warning(&format!("change listener cannot connect: {error}"));
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        wake();
        loop {
            if closed.load(Ordering::Relaxed) {
                return;
            }
            let heard = {
                let mut notifications = client.notifications();
                let first = notifications.timeout_iter(Duration::from_secs(1)).next();
                match first {
                    Ok(Some(_)) => {
                        // Several writes at once are told in one wake (the
                        // ones already here, without waiting for more).
                        while let Ok(Some(_)) = notifications.iter().next() {}
                        Ok(true)
                    }
                    Ok(None) => Ok(false),
                    Err(error) => Err(error),
                }
            };
            match heard {
                Ok(true) => wake(),
                Ok(false) if client.is_closed() => break,
                Ok(false) => {}
                Err(_) => break,
            }
        }
    }
}

/// The store has no logger of its own (it is a library without tracing):
/// what its background thread cannot do goes to standard error.
fn tracing_free_warning(message: &str) {
    eprintln!("shellgate store: {message}");
}

/// A parameter as Postgres takes it: converted to the type Postgres
/// inferred for its placeholder.
#[derive(Debug)]
struct PgParam<'a>(Param<'a>);

impl ToSql for PgParam<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Param::Null => Ok(IsNull::Yes),
            Param::Integer(value) => match *ty {
                Type::INT8 => value.to_sql(ty, out),
                Type::INT4 => i32::try_from(value)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(value)?.to_sql(ty, out),
                Type::FLOAT8 => (value as f64).to_sql(ty, out),
                Type::BOOL => (value != 0).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => value.to_string().to_sql(ty, out),
                _ => Err(format!("an integer cannot be a {ty} parameter").into()),
            },
            Param::Real(value) => match *ty {
                Type::FLOAT8 => value.to_sql(ty, out),
                Type::FLOAT4 => (value as f32).to_sql(ty, out),
                _ => Err(format!("a real cannot be a {ty} parameter").into()),
            },
            Param::Text(text) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    text.to_sql(ty, out)
                }
                _ => Err(format!("text cannot be a {ty} parameter").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn pg_params<'a>(params: &'a [&'a dyn ToParam]) -> Vec<PgParam<'a>> {
    params
        .iter()
        .map(|param| PgParam(param.to_param()))
        .collect()
}

fn cell(row: &postgres::Row, index: usize) -> Result<Cell> {
    let column = &row.columns()[index];
    let cell = match *column.type_() {
        Type::INT8 => row
            .try_get::<_, Option<i64>>(index)?
            .map_or(Cell::Null, Cell::Integer),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(index)?
            .map_or(Cell::Null, |v| Cell::Integer(v.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(index)?
            .map_or(Cell::Null, |v| Cell::Integer(v.into())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(index)?
            .map_or(Cell::Null, |v| Cell::Integer(v.into())),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(index)?
            .map_or(Cell::Null, Cell::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(index)?
            .map_or(Cell::Null, |v| Cell::Real(v.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row
            .try_get::<_, Option<String>>(index)?
            .map_or(Cell::Null, Cell::Text),
        ref other => {
            return Err(StoreError::Column {
                index,
                problem: if *other == Type::NUMERIC {
                    "is NUMERIC (cast it to BIGINT or DOUBLE PRECISION in the query)"
                } else {
                    "has a type the store does not read"
                },
            })
        }
    };
    Ok(cell)
}

impl Sql for PgConnection {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, params: &[&dyn ToParam]) -> Result<usize> {
        let statement = self.statement(sql)?;
        let params = pg_params(params);
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|param| param as &(dyn ToSql + Sync))
            .collect();
        let changed = self.client.execute(&statement, &refs)?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    fn each_row(
        &mut self,
        sql: &str,
        params: &[&dyn ToParam],
        each: &mut dyn FnMut(Row) -> Result<()>,
    ) -> Result<()> {
        let statement = self.statement(sql)?;
        let params = pg_params(params);
        let mut rows = self.client.query_raw(&statement, params.iter())?;
        while let Some(row) = rows.next()? {
            let cells = (0..row.len())
                .map(|index| cell(&row, index))
                .collect::<Result<Vec<_>>>()?;
            each(Row::new(cells))?;
        }
        Ok(())
    }

    fn lock(&mut self, key: &str) -> Result<()> {
        self.client.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&key],
        )?;
        Ok(())
    }
}
