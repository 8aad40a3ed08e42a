//! What only the console reads: containers searched and paged in SQL
//! (10,000 containers are never read whole), the project's stored
//! responses, its usage by day, container and model, and the projects a
//! session may see.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use shellgate_store::{session_cost, ContainerRow, ContainerSearch, ContainerStatus};
use shellgate_wire::console::{
    ConsoleContainer, ConsoleList, ConsoleResponse, ConsoleUsage, ContainerCost, DayUsage,
    ModelTokens, OtherContainers, ProjectEntry,
};

use super::session::{named_project, Signed};
use super::Console;
use crate::error::{ApiError, ApiResult};
use crate::http::{ApiQuery, Project};
use crate::sandboxes::containers::{container_object, owned};

/// The most rows a page holds.
const MAX_PAGE: u32 = 200;
const DEFAULT_PAGE: u32 = 50;
/// The most days the usage page covers.
const MAX_DAYS: u32 = 366;

fn page_size(limit: Option<u32>) -> ApiResult<u32> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_PAGE}"),
        )),
    }
}

/// A container row as the console shows it.
fn console_container(console: &Console, row: &ContainerRow) -> ApiResult<ConsoleContainer> {
    let sandbox_seconds = row.billed_seconds
        + if row.session_open {
            session_cost(row.session_seconds)
        } else {
            0.0
        };
    Ok(ConsoleContainer {
        container: container_object(row)?,
        project: row.project.clone(),
        expires_at: row.last_active_at + i64::from(row.expires_minutes) * 60,
        sandbox_seconds,
        cost: sandbox_seconds * console.app.config.sandbox.sandbox_price_per_second,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContainerQuery {
    status: Option<String>,
    q: Option<String>,
    image: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
    /// A project, or `*` (admins): every project.
    project: Option<String>,
}

/// `GET /console/api/containers`.
pub(super) async fn containers(
    State(console): State<Arc<Console>>,
    signed: Signed,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ContainerQuery>,
) -> ApiResult<Json<ConsoleList<ConsoleContainer>>> {
    let asked = query.project.as_deref().or(named_project(&headers));
    let search = ContainerSearch {
        project: signed.scope(asked)?,
        status: match query.status.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(status) => Some(ContainerStatus::parse(status).ok_or_else(|| {
                ApiError::invalid(
                    "status",
                    "status must be one of creating, running, suspended, deleted",
                )
            })?),
        },
        text: query.q.filter(|q| !q.trim().is_empty()),
        image: query.image.filter(|i| !i.is_empty()),
        after: query.after.filter(|a| !a.is_empty()),
        limit: page_size(query.limit)?,
    };
    let page = console
        .app
        .db(move |s| s.search_containers(&search))
        .await?;
    let data = page
        .rows
        .iter()
        .map(|row| console_container(&console, row))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(ConsoleList::new(
        data,
        page.has_more,
        Some(page.total),
        |c: &ConsoleContainer| c.container.id.clone(),
    )))
}

/// `GET /console/api/containers/{id}`: one container, of a project the
/// session may see (another's is a 404, as the API answers).
pub(super) async fn container(
    State(console): State<Arc<Console>>,
    signed: Signed,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<ConsoleContainer>> {
    let project = Project(signed.project_of(&headers)?);
    let row = owned(&console.app, &project, &id).await?;
    Ok(Json(console_container(&console, &row)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageQuery {
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /console/api/responses`: the project's stored responses, newest
/// first.
pub(super) async fn responses(
    State(console): State<Arc<Console>>,
    signed: Signed,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<ConsoleList<ConsoleResponse>>> {
    let project = signed.project_of(&headers)?;
    let limit = page_size(query.limit)?;
    let after = query.after.filter(|a| !a.is_empty());
    let (rows, has_more) = console
        .app
        .db(move |s| s.response_summaries(&project, after.as_deref(), limit))
        .await?;
    let price = console.app.config.sandbox.sandbox_price_per_second;
    let data = rows
        .into_iter()
        .map(|row| ConsoleResponse {
            cost: row.sandbox_seconds * price,
            id: row.id,
            model: row.model,
            status: row.status.as_str().to_owned(),
            created_at: row.created_at,
            input_tokens: row.input_tokens,
            output_tokens: row.output_tokens,
            sandbox_seconds: row.sandbox_seconds,
        })
        .collect();
    Ok(Json(ConsoleList::new(
        data,
        has_more,
        None,
        |r: &ConsoleResponse| r.id.clone(),
    )))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UsageQuery {
    days: Option<u32>,
}

/// The most containers the usage page lists one by one.
const USAGE_CONTAINERS: usize = 50;

/// Each date's sandbox seconds (`daily`'s rows of that date, summed) and
/// their cost, in the order of `dates`.
fn daily_costs(dates: Vec<String>, daily: &[(String, f64)], price: f64) -> Vec<DayUsage> {
    dates
        .into_iter()
        .map(|date| {
            let seconds = daily
                .iter()
                .filter(|(day, _)| *day == date)
                .fold(0.0, |total, (_, seconds)| total + seconds);
            DayUsage {
                date,
                sandbox_seconds: seconds,
                cost: seconds * price,
            }
        })
        .collect()
}

/// The containers that cost most, most first (at most `USAGE_CONTAINERS`,
/// their names not yet filled in), and the rest summed: a page shows the
/// few that matter and still adds up.
fn costliest_containers(
    seconds_by_container: Vec<(String, f64)>,
    price: f64,
) -> (Vec<ContainerCost>, OtherContainers) {
    let mut containers: Vec<ContainerCost> = seconds_by_container
        .into_iter()
        .filter(|(_, seconds)| *seconds > 0.0)
        .map(|(container_id, seconds)| ContainerCost {
            container_id,
            name: None,
            sandbox_seconds: seconds,
            cost: seconds * price,
        })
        .collect();
    containers.sort_by(|a, b| b.sandbox_seconds.total_cmp(&a.sandbox_seconds));
    let rest = containers.split_off(containers.len().min(USAGE_CONTAINERS));
    let others = rest.iter().map(|c| c.sandbox_seconds).sum::<f64>();
    let other_containers = OtherContainers {
        containers: u64::try_from(rest.len()).unwrap_or(u64::MAX),
        sandbox_seconds: others,
        cost: others * price,
    };
    (containers, other_containers)
}

/// `GET /console/api/usage`: over the asked range, sandbox time and cost
/// per day (every day of the range, zeros included) and per container
/// (deleted ones too), tokens per model (every model API's calls), their
/// totals, and the project's limits in use. Every view is a sum of the same
/// ledger rows (`Store::usage_ledger`), so they add up to the same totals,
/// and over all time to `/v1/usage`'s.
pub(super) async fn usage(
    State(console): State<Arc<Console>>,
    signed: Signed,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<UsageQuery>,
) -> ApiResult<Json<ConsoleUsage>> {
    let project = signed.project_of(&headers)?;
    let days = match query.days {
        None => 30,
        Some(n) if (1..=MAX_DAYS).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::invalid(
                "days",
                format!("days must be between 1 and {MAX_DAYS}"),
            ))
        }
    };
    let today = crate::time::now().div_euclid(86_400);
    let dates: Vec<String> = (0..i64::from(days))
        .rev()
        .map(|back| day_name(today - back))
        .collect();
    let since = dates.first().cloned().unwrap_or_default();
    let owner = project.clone();
    let (daily, ledger) = console
        .app
        .db(move |s| {
            Ok((
                s.daily_usage(&owner, &since)?,
                s.usage_ledger(&owner, Some(&since), false)?,
            ))
        })
        .await?;
    let price = console.app.config.sandbox.sandbox_price_per_second;
    let sandbox_seconds = ledger.sandbox_seconds();
    let tokens = ledger.tokens();
    let days = daily_costs(dates, &daily, price);
    let (mut containers, other_containers) = costliest_containers(ledger.containers, price);
    let (owner, ids) = (
        project.clone(),
        containers
            .iter()
            .map(|c| c.container_id.clone())
            .collect::<Vec<_>>(),
    );
    let names = console
        .app
        .db(move |s| s.container_names(&owner, &ids))
        .await?;
    for container in &mut containers {
        container.name = names
            .iter()
            .find(|(id, _)| *id == container.container_id)
            .map(|(_, name)| name.clone());
    }
    let mut models: Vec<ModelTokens> = ledger
        .models
        .into_iter()
        .map(|m| ModelTokens {
            model: m.model,
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            responses: m.responses,
        })
        .collect();
    models.sort_by(|a, b| {
        (b.input_tokens + b.output_tokens)
            .cmp(&(a.input_tokens + a.output_tokens))
            .then_with(|| a.model.cmp(&b.model))
    });
    Ok(Json(ConsoleUsage {
        object: "console.usage",
        quota: console.app.admission.quota(&project).await?,
        project,
        sandbox_seconds,
        cost: sandbox_seconds * price,
        input_tokens: tokens.input_tokens,
        output_tokens: tokens.output_tokens,
        responses: tokens.responses,
        days,
        containers,
        other_containers,
        models,
        price_per_second: price,
    }))
}

/// Day `day` (days since 1970-01-01) as `YYYY-MM-DD`.
fn day_name(day: i64) -> String {
    let time = shellgate_wire::time::rfc3339(day * 86_400);
    time.get(..10).unwrap_or_default().to_owned()
}

/// `GET /console/api/projects`: the projects the session may see.
pub(super) async fn projects(
    State(console): State<Arc<Console>>,
    signed: Signed,
) -> ApiResult<Json<ConsoleList<ProjectEntry>>> {
    let all = console.app.db(|s| s.projects()).await?;
    let own = signed.session.grant.project.clone();
    let admin = signed.is_admin();
    let mut data: Vec<ProjectEntry> = all
        .into_iter()
        .filter(|p| admin || p.project == own)
        .map(|p| ProjectEntry {
            project: p.project,
            containers: p.containers,
            running: p.running,
            keys: p.keys,
        })
        .collect();
    if data.is_empty() {
        data.push(ProjectEntry {
            project: own,
            containers: 0,
            running: 0,
            keys: 0,
        });
    }
    Ok(Json(ConsoleList::new(
        data,
        false,
        None,
        |p: &ProjectEntry| p.project.clone(),
    )))
}

/// Any other `/console/api/...` path: a 404 after the session check (an
/// unsigned caller learns nothing of what exists).
pub(super) async fn unknown(_signed: Signed) -> ApiError {
    crate::ops::not_found().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_named_in_utc() {
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(20_788), "2026-12-01");
    }
}
