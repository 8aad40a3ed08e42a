//! The stores every test of this crate runs against: SQLite in memory, and
//! Postgres when `SHELLGATE_TEST_POSTGRES_URL` names a server (the test
//! command starts one), each test in a schema of its own, dropped after.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::connection::Store;
use crate::sql::{PostgresDatabase, PostgresOptions};

/// A store under test (dereferences to the [`Store`]).
pub(crate) struct TestStore {
    store: Store,
    /// The Postgres database whose test schema goes when the test ends.
    schema_owner: Option<PostgresDatabase>,
}

impl std::ops::Deref for TestStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some(owner) = &self.schema_owner {
            let _ = owner.drop_schema();
        }
    }
}

/// The Postgres server's URL, if the tests have one.
pub(crate) fn postgres_url() -> Option<String> {
    std::env::var("SHELLGATE_TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// A Postgres store in a new, empty schema.
pub(crate) fn postgres_store(url: &str, pool_size: usize) -> TestStore {
    // The test server offers TLS with a certificate of its own CA
    // (scripts/lib/postgres.sh): the store verifies it as it would any.
    let ca = std::env::var("SHELLGATE_TEST_POSTGRES_CA")
        .ok()
        .map(Into::into);
    postgres_store_with(url, pool_size, ca).expect("the test store opens")
}

/// A Postgres store in a new, empty schema, trusting `ca_file` too.
pub(crate) fn postgres_store_with(
    url: &str,
    pool_size: usize,
    ca_file: Option<std::path::PathBuf>,
) -> crate::Result<TestStore> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let schema = format!(
        "test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let options = PostgresOptions {
        url: url.to_owned(),
        schema: Some(schema),
        pool_size,
        ca_file,
    };
    let owner = PostgresDatabase::open(&options)?;
    Ok(TestStore {
        store: Store::open_postgres(&options)?,
        schema_owner: Some(owner),
    })
}

/// One store per database the tests run on.
pub(crate) fn stores() -> Vec<TestStore> {
    let mut stores = vec![TestStore {
        store: Store::in_memory().expect("an in-memory store opens"),
        schema_owner: None,
    }];
    if let Some(url) = postgres_url() {
        stores.push(postgres_store(&url, 4));
    }
    stores
}
