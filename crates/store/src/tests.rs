//! The store's tests: each table's operations on an in-memory store, and
//! the database files' modes on disk.

#[allow(unused_imports)]
use crate::*;

/// A running container's row, for tests of other files.
pub(crate) fn container_row(id: &str, project: &str) -> ContainerRow {
    tables::container(id, project, id)
}

mod tables {
    use super::*;

    pub(super) fn container(id: &str, project: &str, name: &str) -> ContainerRow {
        ContainerRow {
            id: id.into(),
            project: project.into(),
            name: name.into(),
            created_at: 1,
            last_active_at: 1,
            status: ContainerStatus::Running,
            memory_limit: shellgate_wire::MemoryLimit::OneGb,
            expires_minutes: 20,
            network_policy: r#"{"type":"disabled"}"#.into(),
            skills: "[]".into(),
            file_ids: "[]".into(),
            billed_seconds: 0.0,
            session_seconds: 0.0,
            session_open: false,
            image: "host".into(),
            sleep_after_secs: None,
            exposed_ports: Vec::new(),
            port_token: None,
            node_id: String::new(),
        }
    }

    #[test]
    fn exposed_ports_and_the_port_token_are_kept_and_found_by_id_alone() {
        for store in crate::testing::stores() {
            let mut row = container("c1", "alpha", "x");
            row.exposed_ports = vec![8000, 3000];
            row.port_token = Some("sgpt_1".into());
            store.insert_container(&row).unwrap();
            store
                .insert_container(&container("c2", "alpha", "y"))
                .unwrap();
            assert_eq!(store.container("alpha", "c1").unwrap(), Some(row.clone()));
            assert_eq!(store.container_by_id("c1").unwrap(), Some(row));
            let plain = store.container_by_id("c2").unwrap().unwrap();
            assert_eq!((plain.exposed_ports, plain.port_token), (vec![], None));
            assert_eq!(store.container_by_id("c3").unwrap(), None);
        }
    }

    #[test]
    fn a_row_with_an_unknown_status_or_limit_is_corrupt_not_a_default() {
        for store in crate::testing::stores() {
            store
                .insert_container(&container("c1", "alpha", "x"))
                .unwrap();
            store.open_session("c1").unwrap();
            for (column, value) in [
                ("status", "sleeping"),
                ("memory_limit", "2g"),
                ("exposed_ports", "8000,http"),
            ] {
                store
                    .write(|sql| {
                        sql.execute(
                            &format!("UPDATE containers SET {column} = ?1 WHERE id = 'c1'"),
                            &[&value],
                        )
                    })
                    .unwrap();
                match store.container("alpha", "c1") {
                    Err(StoreError::Corrupt {
                        table: "containers",
                        column: named,
                        value: held,
                    }) => {
                        assert_eq!((named, held.as_str()), (column, value));
                    }
                    other => panic!("{column} = {value:?} read as {other:?}"),
                }
                assert!(matches!(
                    store.all_containers(),
                    Err(StoreError::Corrupt { .. })
                ));
                if column == "memory_limit" {
                    assert!(matches!(
                        store.active_load("alpha"),
                        Err(StoreError::Corrupt { .. })
                    ));
                }
                store
                .write(|sql| {
                    sql.execute(
                        "UPDATE containers SET status = 'running', memory_limit = '1g', exposed_ports = '' WHERE id = 'c1'",
                        &[],
                    )
                })
                .unwrap();
            }
            // A negative size is corrupt too, not wrapped around.
            store
                .record_egress(&[EgressRow {
                    id: "e1".into(),
                    project: String::new(),
                    container_id: "c1".into(),
                    created_at: 1,
                    kind: "dns".into(),
                    requested_name: None,
                    server_name: None,
                    address: None,
                    port: 53,
                    verdict: EgressVerdict::Allowed,
                    reason: String::new(),
                    bytes_out: 0,
                    bytes_in: 0,
                    duration_ms: 0,
                    aggregated: 0,
                }])
                .unwrap();
            store
                .write(|sql| sql.execute("UPDATE egress SET port = 70000", &[]))
                .unwrap();
            let page = Page {
                limit: 10,
                ascending: true,
                after: None,
            };
            assert!(matches!(
                store.list_egress("c1", &page),
                Err(StoreError::Corrupt {
                    table: "egress",
                    column: "port",
                    ..
                })
            ));
            store
                .write(|sql| sql.execute("UPDATE egress SET port = 53, verdict = 'maybe'", &[]))
                .unwrap();
            assert!(matches!(
                store.list_egress("c1", &page),
                Err(StoreError::Corrupt {
                    table: "egress",
                    column: "verdict",
                    ..
                })
            ));
        }
    }

    #[test]
    fn session_ids_map_to_one_container_and_follow_a_replacement() {
        for store in crate::testing::stores() {
            store
                .insert_container(&container("c1", "alpha", "x"))
                .unwrap();
            assert_eq!(store.session_container("alpha", "s").unwrap(), None);
            assert_eq!(store.claim_session("alpha", "s", "c1", None).unwrap(), "c1");
            // A racing request that made its own container loses.
            assert_eq!(store.claim_session("alpha", "s", "c2", None).unwrap(), "c1");
            // Another project's same session id is another session.
            assert_eq!(store.claim_session("beta", "s", "c9", None).unwrap(), "c9");
            // The container went away: the next one replaces it, once.
            assert_eq!(
                store.claim_session("alpha", "s", "c3", Some("c1")).unwrap(),
                "c3"
            );
            assert_eq!(
                store.claim_session("alpha", "s", "c4", Some("c1")).unwrap(),
                "c3"
            );
            // Deleting a container forgets the sessions that pointed at it.
            store
                .insert_container(&container("c3", "alpha", "y"))
                .unwrap();
            store.set_sleep_after("c3", Some(60)).unwrap();
            assert_eq!(
                store
                    .container("alpha", "c3")
                    .unwrap()
                    .unwrap()
                    .sleep_after_secs,
                Some(60)
            );
            store
                .set_container_skills("c3", r#"[{"name":"n"}]"#)
                .unwrap();
            assert_eq!(
                store.container("alpha", "c3").unwrap().unwrap().skills,
                r#"[{"name":"n"}]"#
            );
            store
                .set_network_policy("c3", r#"{"type":"disabled"}"#)
                .unwrap();
            assert_eq!(
                store
                    .container("alpha", "c3")
                    .unwrap()
                    .unwrap()
                    .network_policy,
                r#"{"type":"disabled"}"#
            );
            store.delete_container("c3").unwrap();
            assert_eq!(store.session_container("alpha", "s").unwrap(), None);
        }
    }

    #[test]
    fn egress_rows_take_their_containers_project_and_page() {
        for store in crate::testing::stores() {
            store
                .insert_container(&container("c1", "alpha", "x"))
                .unwrap();
            let row = |i: u32, container: &str| EgressRow {
                id: format!("eg{i}"),
                project: String::new(),
                container_id: container.into(),
                created_at: i as i64,
                kind: "dns".into(),
                requested_name: Some("a.test".into()),
                server_name: None,
                address: Some("203.0.113.7".into()),
                port: 53,
                verdict: EgressVerdict::Allowed,
                reason: "allowed".into(),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 1,
                aggregated: 0,
            };
            let rows: Vec<EgressRow> = (0..5)
                .map(|i| row(i, "c1"))
                .chain([row(9, "gone")])
                .collect();
            assert_eq!(
                store.record_egress(&rows).unwrap(),
                5,
                "unknown containers are dropped"
            );
            let page = Page {
                limit: 3,
                ascending: true,
                after: None,
            };
            let (first, more) = store.list_egress("c1", &page).unwrap();
            assert!(more);
            assert_eq!(first.len(), 3);
            assert!(first.iter().all(|r| r.project == "alpha"));
            let (rest, more) = store
                .list_egress(
                    "c1",
                    &Page {
                        after: Some(first[2].id.clone()),
                        ..page
                    },
                )
                .unwrap();
            assert!(!more);
            assert_eq!(
                rest.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                ["eg3", "eg4"]
            );
        }
    }

    #[test]
    fn aggregate_egress_rows_count_per_container_and_old_rows_go_in_batches() {
        for store in crate::testing::stores() {
            store
                .insert_container(&container("c1", "alpha", "x"))
                .unwrap();
            let row = |i: u32, created_at: i64, aggregated: u64| EgressRow {
                id: format!("eg{i}"),
                project: String::new(),
                container_id: "c1".into(),
                created_at,
                kind: "dns".into(),
                requested_name: None,
                server_name: None,
                address: None,
                port: 53,
                verdict: if aggregated > 0 {
                    EgressVerdict::Aggregated
                } else {
                    EgressVerdict::Allowed
                },
                reason: "r".into(),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                aggregated,
            };
            // Five old rows (two aggregate ones), three recent ones.
            let rows: Vec<EgressRow> = (0..8)
                .map(|i| {
                    row(
                        i,
                        if i < 5 { 100 } else { 1_000 },
                        [0, 7, 0, 3, 0, 0, 0, 0][i as usize],
                    )
                })
                .collect();
            store.record_egress(&rows).unwrap();
            assert_eq!(store.egress_unlogged("c1").unwrap(), 10);
            assert_eq!(store.egress_unlogged("gone").unwrap(), 0);
            let all = Page {
                limit: 100,
                ascending: true,
                after: None,
            };
            assert_eq!(store.list_egress("c1", &all).unwrap().0[1].aggregated, 7);
            assert_eq!(store.delete_egress_before(500, 2).unwrap(), 2);
            assert_eq!(store.delete_egress_before(500, 2).unwrap(), 2);
            assert_eq!(store.delete_egress_before(500, 2).unwrap(), 1);
            assert_eq!(store.delete_egress_before(500, 2).unwrap(), 0);
            let left = store.list_egress("c1", &all).unwrap().0;
            assert_eq!(
                left.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                ["eg5", "eg6", "eg7"]
            );
            // The container's total outlives the rows.
            assert_eq!(store.egress_unlogged("c1").unwrap(), 10);
        }
    }

    #[test]
    fn skill_versions_number_up_and_never_reuse_a_number() {
        for store in crate::testing::stores() {
            let version = |id: &str, name: &str| SkillVersionRow {
                id: id.into(),
                skill_id: "skill_1".into(),
                project: "alpha".into(),
                version: 1,
                name: name.into(),
                description: format!("{name} does things"),
                created_at: 1,
                bytes: 10,
            };
            let skill = SkillRow {
                id: "skill_1".into(),
                project: "alpha".into(),
                name: "one".into(),
                description: "one does things".into(),
                created_at: 1,
                default_version: 1,
                latest_version: 1,
            };
            store.insert_skill(&skill, &version("v1", "one")).unwrap();
            let mut second = version("v2", "two");
            let updated = store
                .add_skill_version("alpha", &mut second, false)
                .unwrap()
                .unwrap();
            assert_eq!(
                (
                    second.version,
                    updated.latest_version,
                    updated.default_version
                ),
                (2, 2, 1)
            );
            assert_eq!(updated.name, "one");
            let mut third = version("v3", "three");
            let updated = store
                .add_skill_version("alpha", &mut third, true)
                .unwrap()
                .unwrap();
            assert_eq!((updated.latest_version, updated.default_version), (3, 3));
            assert_eq!(updated.name, "three");
            // Not another project's; not the default.
            assert!(store
                .add_skill_version("beta", &mut version("v9", "x"), false)
                .unwrap()
                .is_none());
            assert_eq!(
                store.delete_skill_version("alpha", "skill_1", 3).unwrap(),
                Err(SkillVersionDelete::IsDefault)
            );
            store
                .set_default_skill_version("alpha", "skill_1", 1)
                .unwrap()
                .unwrap();
            assert_eq!(
                store
                    .delete_skill_version("alpha", "skill_1", 3)
                    .unwrap()
                    .unwrap()
                    .id,
                "v3"
            );
            assert_eq!(
                store
                    .skill("alpha", "skill_1")
                    .unwrap()
                    .unwrap()
                    .latest_version,
                2
            );
            let mut fourth = version("v4", "four");
            store
                .add_skill_version("alpha", &mut fourth, false)
                .unwrap();
            assert_eq!(fourth.version, 4, "3 is never given again");
            // Found by its id too, only under its skill and project.
            let found = store.skill_version_by_id("alpha", "skill_1", "v4").unwrap();
            assert_eq!(found.as_ref().map(|v| v.version), Some(4), "{found:?}");
            for (project, skill, id) in [
                ("beta", "skill_1", "v4"),
                ("alpha", "skill_2", "v4"),
                ("alpha", "skill_1", "v3"),
            ] {
                let found = store.skill_version_by_id(project, skill, id).unwrap();
                assert_eq!(found, None, "{project} {skill} {id}");
            }
            let page = Page {
                limit: 10,
                ascending: true,
                after: None,
            };
            let (versions, _) = store.list_skill_versions("skill_1", &page).unwrap();
            assert_eq!(
                versions.iter().map(|v| v.version).collect::<Vec<_>>(),
                [1, 2, 4]
            );
            assert_eq!(
                store
                    .delete_skill("alpha", "skill_1")
                    .unwrap()
                    .unwrap()
                    .len(),
                3
            );
            assert!(store.skill("alpha", "skill_1").unwrap().is_none());
            assert!(store.delete_skill("alpha", "skill_1").unwrap().is_none());
        }
    }

    #[test]
    fn keys_are_hashed_and_map_to_projects() {
        for store in crate::testing::stores() {
            store.add_key("sk-one", "alpha", 0).unwrap();
            assert_eq!(
                store.project_for_key("sk-one").unwrap().as_deref(),
                Some("alpha")
            );
            assert_eq!(store.project_for_key("sk-two").unwrap(), None);
            let stored: String = store
                .read(|sql| sql.query_one("SELECT hash FROM api_keys", &[], |row| row.get(0)))
                .unwrap();
            assert!(!stored.contains("sk-one"));
        }
    }

    #[test]
    fn pagination_walks_every_row_once_in_both_orders() {
        for store in crate::testing::stores() {
            for i in 0..25 {
                store
                    .insert_container(&container(
                        &format!("c{i}"),
                        "p",
                        if i % 2 == 0 { "even" } else { "odd" },
                    ))
                    .unwrap();
            }
            store
                .insert_container(&container("other", "q", "even"))
                .unwrap();
            for ascending in [true, false] {
                let mut seen = Vec::new();
                let mut after = None;
                loop {
                    let (rows, more) = store
                        .list_containers(
                            "p",
                            None,
                            &Page {
                                limit: 7,
                                ascending,
                                after,
                            },
                        )
                        .unwrap();
                    seen.extend(rows.iter().map(|r| r.id.clone()));
                    if !more {
                        break;
                    }
                    after = rows.last().map(|r| r.id.clone());
                }
                assert_eq!(seen.len(), 25);
                assert!(!seen.contains(&"other".to_string()));
                if !ascending {
                    assert_eq!(seen[0], "c24");
                }
            }
            let (named, _) = store
                .list_containers(
                    "p",
                    Some("even"),
                    &Page {
                        limit: 100,
                        ..Page::default()
                    },
                )
                .unwrap();
            assert_eq!(named.len(), 13);
            assert!(
                store.container("q", "c1").unwrap().is_none(),
                "another project's container is invisible"
            );
            // A listing by name reads that name's rows by index, and a page
            // after a cursor starts at the cursor.
            for (filter, index) in [
                (
                    Some("name"),
                    "INDEX containers_by_project_name (project=? AND name=? AND seq<?)",
                ),
                (
                    None,
                    "INDEX containers_by_project_seq (project=? AND seq<?)",
                ),
            ] {
                let query = crate::paging::page_query(
                    "containers",
                    crate::containers::CONTAINER_COLUMNS,
                    "project",
                    filter,
                    true,
                    false,
                );
                let plan: Vec<String> = store
                    .read(|sql| {
                        if !matches!(sql.dialect(), crate::sql::Dialect::Sqlite) {
                            return Ok(Vec::new());
                        }
                        sql.query(
                            &format!("EXPLAIN QUERY PLAN {query}"),
                            &[&"p", &"even", &7i64, &100i64],
                            |row| row.get(3),
                        )
                    })
                    .unwrap();
                assert!(
                    plan.is_empty() || plan.iter().any(|step| step.contains(index)),
                    "{plan:?}"
                );
            }
        }
    }

    #[test]
    fn sessions_bill_at_least_the_minimum() {
        for store in crate::testing::stores() {
            let billed = |store: &Store| {
                store
                    .usage_ledger("p", None, true)
                    .unwrap()
                    .sandbox_seconds()
            };
            store.insert_container(&container("c1", "p", "n")).unwrap();
            store.open_session("c1").unwrap();
            store.record_activity("c1", 5, 2.5).unwrap();
            assert_eq!(billed(&store), 30.0);
            store
                .close_session("c1", ContainerStatus::Suspended)
                .unwrap();
            store.open_session("c1").unwrap();
            store.record_activity("c1", 6, 45.0).unwrap();
            store
                .close_session("c1", ContainerStatus::Suspended)
                .unwrap();
            assert_eq!(billed(&store), 75.0);
            store.delete_container("c1").unwrap();
            assert_eq!(billed(&store), 75.0, "usage outlives the container");
        }
    }

    #[test]
    fn closing_many_sessions_bills_each_as_closing_one_does() {
        for store in crate::testing::stores() {
            for id in ["c1", "c2", "c3"] {
                store.insert_container(&container(id, "p", id)).unwrap();
                store.open_session(id).unwrap();
            }
            store.record_activity("c1", 5, 42.5).unwrap();
            let ids = ["c1".to_owned(), "c2".to_owned(), "gone".to_owned()];
            store
                .close_sessions(&ids, ContainerStatus::Suspended)
                .unwrap();
            for (id, open) in [("c1", false), ("c2", false), ("c3", true)] {
                let row = store.container("p", id).unwrap().unwrap();
                assert_eq!(row.session_open, open, "{id}");
                let status = if open {
                    ContainerStatus::Running
                } else {
                    ContainerStatus::Suspended
                };
                assert_eq!(row.status, status, "{id}");
            }
            let ledger = store.usage_ledger("p", None, true).unwrap();
            assert_eq!(
                ledger.containers,
                vec![
                    ("c1".to_owned(), 42.5),
                    ("c2".to_owned(), 30.0),
                    ("c3".to_owned(), 30.0)
                ]
            );
        }
    }

    #[test]
    fn every_view_of_usage_is_a_sum_of_the_same_rows() {
        for store in crate::testing::stores() {
            for id in ["c1", "c2", "c3"] {
                store.insert_container(&container(id, "p", id)).unwrap();
                store.open_session(id).unwrap();
            }
            store
                .insert_container(&container("idle", "p", "idle"))
                .unwrap();
            store.insert_container(&container("q1", "q", "q1")).unwrap();
            store.open_session("q1").unwrap();
            store.record_activity("c1", 5, 42.5).unwrap();
            store.record_activity("c2", 5, 61.0).unwrap();
            store
                .close_session("c1", ContainerStatus::Suspended)
                .unwrap();
            // c2 deleted, c3 still open (its cost so far counts).
            store.delete_container("c2").unwrap();
            for (model, input, output) in [("gpt-a", 10, 3), ("claude-b", 7, 2), ("gpt-a", 1, 1)] {
                store.record_tokens("p", model, input, output).unwrap();
            }
            store.record_tokens("q", "gpt-a", 100, 100).unwrap();
            let all = store.usage_ledger("p", None, true).unwrap();
            assert_eq!(
                all.containers,
                vec![
                    ("c1".to_owned(), 42.5),
                    ("c2".to_owned(), 61.0),
                    ("c3".to_owned(), 30.0),
                    ("idle".to_owned(), 0.0),
                ]
            );
            assert_eq!(all.sandbox_seconds(), 42.5 + 61.0 + 30.0);
            let names: Vec<_> = all
                .models
                .iter()
                .map(|m| {
                    (
                        m.model.as_str(),
                        m.input_tokens,
                        m.output_tokens,
                        m.responses,
                    )
                })
                .collect();
            assert_eq!(names, [("claude-b", 7, 2, 1), ("gpt-a", 11, 4, 2)]);
            assert_eq!(
                all.tokens(),
                ModelTokens {
                    model: String::new(),
                    input_tokens: 18,
                    output_tokens: 6,
                    responses: 3
                }
            );
            // Today's range is the same usage; the days add up to it.
            let today = crate::usage::utc_day();
            let ranged = store.usage_ledger("p", Some(&today), false).unwrap();
            assert_eq!(ranged.sandbox_seconds(), all.sandbox_seconds());
            assert_eq!(ranged.models, all.models);
            let days = store.daily_usage("p", &today).unwrap();
            assert_eq!(days, vec![(today.clone(), all.sandbox_seconds())]);
            // A later range holds nothing of it.
            let later = store.usage_ledger("p", Some("9999-01-01"), false).unwrap();
            assert_eq!(later, UsageLedger::default());
            assert_eq!(store.total_usage().unwrap(), all.sandbox_seconds() + 30.0);
        }
    }
}

mod file_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_database_and_its_wal_files_are_private_from_the_first_byte() {
        let dir = temp_dir("modes");
        let path = dir.join("shellgate.db");
        // A permissive umask must not matter.
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc_umask(0) };
        let store = Store::open(&path).unwrap();
        // SAFETY: as above, restoring it.
        unsafe { libc_umask(old) };
        store.add_key("k", "p", 0).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.join(format!("shellgate.db{suffix}"));
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} is {mode:o}", file.display());
        }
        // Reads through the reader connections see the writer's commits.
        assert_eq!(store.project_for_key("k").unwrap().as_deref(), Some("p"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    extern "C" {
        #[link_name = "umask"]
        fn libc_umask(mask: u32) -> u32;
    }

    #[test]
    fn a_sync_is_linear_and_keeps_ids_of_unchanged_files() {
        let dir = temp_dir("sync");
        let store = Store::open(&dir.join("db")).unwrap();
        let files: Vec<PresentFile> = (0..10_000)
            .map(|i| PresentFile {
                path: format!("/mnt/data/f{i}"),
                bytes: i,
                modified_unix: 1,
            })
            .collect();
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("cfile_{n}")
        };
        assert_eq!(
            store.sync_container_files("c", &files, &mut next).unwrap(),
            10_000
        );
        let before = store
            .container_file_at("c", "/mnt/data/f7")
            .unwrap()
            .unwrap();
        // Unchanged: nothing written. One gone, one resized, one new.
        assert_eq!(
            store.sync_container_files("c", &files, &mut next).unwrap(),
            0
        );
        let mut changed = files.clone();
        changed.remove(0);
        changed[0].bytes = 999;
        changed.push(PresentFile {
            path: "/mnt/data/new".into(),
            bytes: 1,
            modified_unix: 2,
        });
        assert_eq!(
            store
                .sync_container_files("c", &changed, &mut next)
                .unwrap(),
            3
        );
        assert!(store
            .container_file_at("c", "/mnt/data/f0")
            .unwrap()
            .is_none());
        assert_eq!(
            store
                .container_file_at("c", "/mnt/data/f7")
                .unwrap()
                .unwrap()
                .id,
            before.id,
            "an unchanged file keeps its id"
        );
        let page = Page {
            limit: 100,
            ascending: true,
            after: Some("cfile_nope".into()),
        };
        assert!(matches!(
            store.list_container_files("c", &page),
            Err(StoreError::UnknownCursor(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A node's image cache keeps the images its containers are made from:
/// each once, another node's not.
#[test]
fn images_on_node_names_each_image_of_the_nodes_containers_once() {
    for store in crate::testing::stores() {
        for (id, node, image) in [
            ("a", "n1", "app"),
            ("b", "n1", "app"),
            ("c", "n1", "host"),
            ("d", "n2", "other"),
        ] {
            let mut row = container_row(id, "alpha");
            row.node_id = node.into();
            row.image = image.into();
            store.insert_container(&row).unwrap();
        }
        let mut images = store.images_on_node("n1").unwrap();
        images.sort();
        assert_eq!(images, ["app", "host"]);
        assert!(store.images_on_node("n3").unwrap().is_empty());
    }
}

mod admission_tests {
    use std::sync::Arc;

    use crate::testing::TestStore;
    use crate::{Quotas, Refusal};

    /// A new container's row, as a create writes it.
    fn creating(id: &str, project: &str) -> crate::ContainerRow {
        crate::ContainerRow {
            status: crate::ContainerStatus::Creating,
            ..super::container_row(id, project)
        }
    }

    /// Sixteen creates at once, from as many threads (on Postgres, as many
    /// connections: what two API replicas admitting together look like),
    /// against a quota of five: exactly five are admitted.
    fn concurrent_creates_never_pass_the_quota(store: TestStore) {
        let store = Arc::new(store);
        let quotas = Quotas {
            max_running: 5,
            max_memory_bytes: 64 << 30,
        };
        let admitted: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|n| {
                    let store = Arc::clone(&store);
                    scope.spawn(move || {
                        let row = creating(&format!("c{n}"), "alpha");
                        store
                            .insert_container_within(&row, quotas)
                            .unwrap()
                            .map(|()| row.id)
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|handle| handle.join().unwrap().ok())
                .collect()
        });
        assert_eq!(admitted.len(), 5, "{admitted:?}");
        assert_eq!(store.active_load("alpha").unwrap().containers, 5);
        // Another project has its own quota; memory counts too.
        let tight = Quotas {
            max_running: 10,
            max_memory_bytes: 1 << 30,
        };
        let row = creating("b1", "beta");
        assert_eq!(store.insert_container_within(&row, tight).unwrap(), Ok(()));
        let row = creating("b2", "beta");
        assert_eq!(
            store.insert_container_within(&row, tight).unwrap(),
            Err(Refusal::Memory { claimed: 1 << 30 })
        );
        // Waking counts the same way.
        let first = &admitted[0];
        store
            .close_session(first, crate::ContainerStatus::Suspended)
            .unwrap();
        assert!(matches!(
            store.open_session_within("alpha", first, shellgate_wire::MemoryLimit::OneGb, quotas),
            Ok(Ok(()))
        ));
        let row = creating("c99", "alpha");
        assert_eq!(
            store.insert_container_within(&row, quotas).unwrap(),
            Err(Refusal::Running { running: 5 })
        );
    }

    /// Admission's count and sum: the containers holding processes of
    /// every memory limit, none of the project's suspended ones, none of
    /// another project's; on SQLite, found through the partial index.
    #[test]
    fn the_active_load_counts_only_containers_holding_processes() {
        use shellgate_wire::MemoryLimit;
        let limits = [
            MemoryLimit::OneGb,
            MemoryLimit::FourGb,
            MemoryLimit::SixteenGb,
            MemoryLimit::SixtyFourGb,
        ];
        for store in crate::testing::stores() {
            let mut expected = crate::ActiveLoad::default();
            for (n, limit) in limits.into_iter().cycle().take(12).enumerate() {
                let row = crate::ContainerRow {
                    memory_limit: limit,
                    ..creating(&format!("a{n}"), "alpha")
                };
                store.insert_container(&row).unwrap();
                match n % 3 {
                    // Still being made: it counts.
                    0 => {}
                    // Running, its session open: it counts.
                    1 => {
                        store.open_session(&row.id).unwrap();
                    }
                    // Suspended: it holds no processes.
                    _ => {
                        store.open_session(&row.id).unwrap();
                        store
                            .close_session(&row.id, crate::ContainerStatus::Suspended)
                            .unwrap();
                        continue;
                    }
                }
                expected.containers += 1;
                expected.memory_bytes += limit.bytes();
            }
            store.insert_container(&creating("b0", "beta")).unwrap();
            assert_eq!(store.active_load("alpha").unwrap(), expected);
            assert_eq!(
                store.active_load("nobody").unwrap(),
                crate::ActiveLoad::default()
            );
            let plan: Vec<String> = store
                .read(|sql| {
                    if !matches!(sql.dialect(), crate::sql::Dialect::Sqlite) {
                        return Ok(Vec::new());
                    }
                    sql.query(
                        &format!("EXPLAIN QUERY PLAN {}", crate::containers::ACTIVE_LOAD),
                        &[&"alpha"],
                        |row| row.get(3),
                    )
                })
                .unwrap();
            assert!(
                plan.is_empty()
                    || plan
                        .iter()
                        .any(|step| step.contains("INDEX containers_active_by_project")),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn concurrent_creates_never_pass_the_quota_on_sqlite() {
        let store = crate::testing::stores().into_iter().next().unwrap();
        concurrent_creates_never_pass_the_quota(store);
    }

    #[test]
    fn concurrent_creates_never_pass_the_quota_on_postgres() {
        let Some(url) = crate::testing::postgres_url() else {
            eprintln!("SHELLGATE_TEST_POSTGRES_URL is not set: the Postgres run is skipped");
            return;
        };
        concurrent_creates_never_pass_the_quota(crate::testing::postgres_store(&url, 16));
    }
}

mod tls_tests {
    /// With `sslmode=require`, the store talks to Postgres over TLS only,
    /// verifying the server's certificate: against the CA given, it works;
    /// without it (the test CA is no host root), the connection is refused.
    #[test]
    fn postgres_over_tls_verifies_the_server() {
        let (Some(url), Ok(ca)) = (
            crate::testing::postgres_url(),
            std::env::var("SHELLGATE_TEST_POSTGRES_CA"),
        ) else {
            eprintln!("SHELLGATE_TEST_POSTGRES_CA is not set: the TLS run is skipped");
            return;
        };
        let required = format!("{url}?sslmode=require");
        let store =
            crate::testing::postgres_store_with(&required, 2, Some(ca.into())).expect("TLS opens");
        store.add_key("sk-tls", "alpha", 1).unwrap();
        assert_eq!(
            store.project_for_key("sk-tls").unwrap().as_deref(),
            Some("alpha")
        );
        let refused = crate::testing::postgres_store_with(&required, 2, None);
        assert!(
            matches!(refused, Err(crate::StoreError::Postgres(_))),
            "an unknown CA must be refused"
        );
    }
}

mod close_tests {
    use std::time::{Duration, Instant};

    use crate::sql::{PostgresDatabase, PostgresOptions};
    use crate::{Store, StoreError};

    /// A store of the test's own: its schema, and its connections named so
    /// the server's activity view tells them from everyone else's.
    fn options(url: &str, name: &str) -> PostgresOptions {
        let separator = if url.contains('?') { '&' } else { '?' };
        PostgresOptions {
            url: format!("{url}{separator}application_name={name}"),
            schema: Some(name.to_owned()),
            pool_size: 4,
            ca_file: std::env::var("SHELLGATE_TEST_POSTGRES_CA")
                .ok()
                .map(Into::into),
        }
    }

    /// The connections named `name` the server holds, read until there
    /// are `expected` (or half a minute passed: a backend leaves the view
    /// a moment after its client said goodbye).
    fn connections(observer: &Store, name: &str, expected: i64) -> i64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let count = observer
                .read(|sql| {
                    sql.query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?1",
                        &[&name],
                        |row| row.get::<i64>(0),
                    )
                })
                .unwrap();
            if count == expected || Instant::now() > deadline {
                return count;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn drop_schema(options: &PostgresOptions) {
        PostgresDatabase::open(options)
            .and_then(|database| database.drop_schema())
            .unwrap();
    }

    /// A closed store has said goodbye on every connection (the server
    /// holds none of its), and refuses what is asked of it afterwards.
    #[test]
    fn a_closed_postgres_store_lets_its_connections_go_and_refuses_work() {
        let Some(url) = crate::testing::postgres_url() else {
            eprintln!("SHELLGATE_TEST_POSTGRES_URL is not set: the Postgres run is skipped");
            return;
        };
        let observer = crate::testing::postgres_store(&url, 1);
        let name = format!("close_{}", std::process::id());
        let options = options(&url, &name);
        let store = Store::open_postgres(&options).unwrap();
        store.add_key("sk-close", "alpha", 1).unwrap();
        assert_eq!(
            store.project_for_key("sk-close").unwrap().as_deref(),
            Some("alpha")
        );
        assert!(connections(&observer, &name, 1) >= 1);
        store.close();
        assert_eq!(connections(&observer, &name, 0), 0);
        assert!(matches!(
            store.project_for_key("sk-close"),
            Err(StoreError::Closed)
        ));
        drop(store);
        drop_schema(&options);
    }

    /// A server's tasks end with its runtime, so its store's last owner
    /// may be dropped on a thread that drives an async runtime, where the
    /// blocking client cannot close a connection in place (it would start
    /// a runtime inside the runtime and panic): the connections are still
    /// closed, elsewhere, and nothing panics.
    #[test]
    fn a_postgres_store_dropped_on_an_async_runtime_closes_its_connections_quietly() {
        let Some(url) = crate::testing::postgres_url() else {
            eprintln!("SHELLGATE_TEST_POSTGRES_URL is not set: the Postgres run is skipped");
            return;
        };
        let observer = crate::testing::postgres_store(&url, 1);
        let name = format!("dropped_{}", std::process::id());
        let options = options(&url, &name);
        let store = Store::open_postgres(&options).unwrap();
        store.add_key("sk-dropped", "alpha", 1).unwrap();
        assert!(connections(&observer, &name, 1) >= 1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async move { drop(store) });
        assert_eq!(connections(&observer, &name, 0), 0);
        drop_schema(&options);
    }
}
