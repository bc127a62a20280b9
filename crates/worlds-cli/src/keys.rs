//! `worlds keys create|list|revoke`: the API keys of a world's HTTP server.
//!
//! On a directory the records are written to its `keys/` folder ([`KeyFiles`](worlds_engine::store::KeyFiles)), which is safe
//! while a world holds the directory in any mode; on PostgreSQL to the `api_keys` table, as a
//! visitor. Only digests are written: a new key is printed once and kept nowhere.

use std::io::Write;

use anyhow::{bail, Context};
use comfy_table::{presets, Table};
use worlds_engine::clock::Millis;
use worlds_engine::model::keys::{check_key_id, ApiKeyRecord};
use worlds_server::auth::KeyRing;

use crate::cli::{KeyIdArgs, KeysCreateArgs, KeysListArgs};
use crate::escape::escaped;
use crate::target::Target;
use crate::text::{now_ms, plain, timestamp};

/// `worlds keys create`.
pub(crate) fn create(args: &KeysCreateArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let target = Target::local(&args.world);
    let now = now_ms();
    let expires_at = args
        .expires_in
        .map(|d| now.saturating_add(Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)));
    let new = KeyRing::generate(&args.name, args.scope, now, expires_at);
    target.keys(async |store| {
        store
            .save_key(&new.record)
            .await
            .context("could not save the key")
    })?;
    if args.json {
        let json = serde_json::json!({ "key": new.key, "record": new.record });
        writeln!(out, "{json}")?;
    } else {
        writeln!(
            out,
            "created key {} ({} scope) for {}",
            new.record.id,
            new.record.scope,
            target.describe()
        )?;
        writeln!(out, "{}", new.key)?;
        writeln!(
            out,
            "this is the only time the key is shown: only its digest is kept. Send it as `Authorization: Bearer <key>`."
        )?;
    }
    Ok(())
}

/// `worlds keys list`.
pub(crate) fn list(args: &KeysListArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let target = Target::local(&args.world);
    let records = target.keys(async |store| Ok(store.list_keys().await?))?;
    if args.json {
        for record in &records {
            writeln!(out, "{}", serde_json::to_string(record)?)?;
        }
    } else {
        writeln!(out, "{}", format_table(&records, now_ms()))?;
    }
    Ok(())
}

/// `worlds keys revoke`.
pub(crate) fn revoke(args: &KeyIdArgs, out: &mut impl Write) -> anyhow::Result<()> {
    check_key_id(&args.id)?;
    let target = Target::local(&args.world);
    let now = now_ms();
    let record = target.keys(async |store| {
        let records = store.list_keys().await?;
        let Some(mut record) = records.into_iter().find(|r| r.id == args.id) else {
            bail!("no key with id {} (see `worlds keys list`)", args.id);
        };
        record.revoked_at.get_or_insert(now);
        store.save_key(&record).await?;
        Ok(record)
    })?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&record)?)?;
    } else {
        writeln!(
            out,
            "revoked key {} ({}); servers refuse it within a second",
            record.id,
            escaped(&record.name)
        )?;
    }
    Ok(())
}

/// The keys as a table; `now` decides which have expired.
fn format_table(records: &[ApiKeyRecord], now: Millis) -> String {
    if records.is_empty() {
        return "no keys (create one with `worlds keys create --scope read|write|admin`)"
            .to_owned();
    }
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_header([
        "ID",
        "NAME",
        "SCOPE",
        "CREATED (UTC)",
        "EXPIRES (UTC)",
        "STATE",
    ]);
    for r in records {
        let state = if r.revoked_at.is_some() {
            "revoked"
        } else if r.expires_at.is_some_and(|at| now >= at) {
            "expired"
        } else {
            "active"
        };
        table.add_row([
            r.id.clone(),
            escaped(&r.name).to_string(),
            r.scope.to_string(),
            timestamp(r.created_at),
            r.expires_at.map_or_else(|| "never".to_owned(), timestamp),
            state.to_owned(),
        ]);
    }
    plain(&table)
}
