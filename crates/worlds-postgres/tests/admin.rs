//! The administrative calls on a real database: a schema drop that the server picks as a
//! deadlock's victim is tried again and drops the schema.

mod common;

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// Creates `schema` with two empty tables, `a` and `b`.
async fn two_tables(conn: &mut PgConnection, schema: &str) {
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE \"{schema}\".a (id int)"),
        format!("CREATE TABLE \"{schema}\".b (id int)"),
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
}

/// The session (other than `me`) waiting for a lock on a table of `schema`, and the tables of
/// `schema` it holds locks on.
async fn waiting_session(conn: &mut PgConnection, me: i32, schema: &str) -> (i32, Vec<String>) {
    for _ in 0..200 {
        let waiting: Option<i32> = sqlx::query_scalar(
            "SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE NOT l.granted AND n.nspname = $1 AND l.pid <> $2 LIMIT 1",
        )
        .bind(schema)
        .bind(me)
        .fetch_optional(&mut *conn)
        .await
        .unwrap();
        if let Some(pid) = waiting {
            let held: Vec<String> = sqlx::query_scalar(
                "SELECT c.relname::text FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE l.granted AND n.nspname = $1 AND l.pid = $2",
            )
            .bind(schema)
            .bind(pid)
            .fetch_all(&mut *conn)
            .await
            .unwrap();
            return (pid, held);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the drop never waited for the table this test locked");
}

#[tokio::test]
async fn a_schema_drop_chosen_as_a_deadlock_victim_is_tried_again() {
    if !common::database_up().await {
        return;
    }
    let schema = common::fresh_schema();
    let url = common::url();
    let mut watcher = PgConnection::connect(&url).await.unwrap();
    let mut deadlocked = false;
    // The drop locks the schema's tables one after the other, in an order of the server's
    // choosing: this session locks one first, and once the drop holds the other and waits for
    // the first, asks for the other too, closing the cycle. The drop's session detects it (this
    // one waits far longer before it looks) and is rolled back.
    for (first, second) in [("a", "b"), ("b", "a")] {
        let mut holder = PgConnection::connect(&url).await.unwrap();
        two_tables(&mut holder, &schema).await;
        let me: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut holder)
            .await
            .unwrap();
        sqlx::query("SET deadlock_timeout = '60s'")
            .execute(&mut holder)
            .await
            .unwrap();
        let mut tx = holder.begin().await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "LOCK TABLE \"{schema}\".{first} IN ACCESS SHARE MODE"
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
        let drop = tokio::spawn({
            let (url, options) = (url.clone(), common::options(&schema));
            async move { worlds_postgres::drop_schema(&url, &options).await }
        });
        let (_, held) = waiting_session(&mut watcher, me, &schema).await;
        if held.iter().any(|t| t == second) {
            sqlx::query(AssertSqlSafe(format!(
                "LOCK TABLE \"{schema}\".{second} IN ACCESS SHARE MODE"
            )))
            .execute(&mut *tx)
            .await
            .unwrap();
            deadlocked = true;
        }
        tx.commit().await.unwrap();
        drop.await
            .unwrap()
            .expect("the drop is tried again after the deadlock");
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&schema)
                .fetch_one(&mut watcher)
                .await
                .unwrap();
        assert!(!exists, "the schema is gone");
        if deadlocked {
            break;
        }
    }
    assert!(
        deadlocked,
        "the test never made the drop wait while it held a table"
    );
}
