//! Run queries: filters, pagination and how much data to return.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

use super::RunStatus;

/// How much of each record a query returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolveData {
    /// Everything, including input, output and history.
    #[default]
    All,
    /// Metadata only: input, output, activity payloads and history are left out.
    None,
}

/// One status or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatusFilter {
    /// Exactly this status.
    One(RunStatus),
    /// Any of these.
    Any(Vec<RunStatus>),
}

impl StatusFilter {
    /// True if `status` passes the filter.
    pub fn matches(&self, status: RunStatus) -> bool {
        match self {
            StatusFilter::One(s) => *s == status,
            StatusFilter::Any(list) => list.contains(&status),
        }
    }
}

impl From<RunStatus> for StatusFilter {
    fn from(status: RunStatus) -> Self {
        StatusFilter::One(status)
    }
}

impl From<Vec<RunStatus>> for StatusFilter {
    fn from(list: Vec<RunStatus>) -> Self {
        StatusFilter::Any(list)
    }
}

impl<const N: usize> From<[RunStatus; N]> for StatusFilter {
    fn from(list: [RunStatus; N]) -> Self {
        StatusFilter::Any(list.to_vec())
    }
}

/// Which runs a query returns. Results are newest first (by creation time).
///
/// Use `offset`/`limit` for simple paging, or `cursor` (the id of the last run of the previous
/// page) for stable paging while runs are being added.
///
/// ```
/// use worlds_engine::{RunStatus, WorkflowQueryFilter};
/// let filter = WorkflowQueryFilter::new()
///     .status([RunStatus::Failed, RunStatus::Cancelled])
///     .workflow_name("checkout")
///     .limit(20);
/// assert_eq!(filter.limit, Some(20));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WorkflowQueryFilter {
    /// Only runs in this status (or these statuses).
    pub status: Option<StatusFilter>,
    /// Only runs of this workflow.
    #[serde(alias = "workflowName")]
    pub workflow_name: Option<String>,
    /// Only children of this run.
    #[serde(alias = "parentId")]
    pub parent_id: Option<String>,
    /// Only runs whose workflow id starts with this (`order-` finds `order-42`).
    #[serde(alias = "workflowIdPrefix")]
    pub workflow_id_prefix: Option<String>,
    /// Only runs created at or after this time (ms since the Unix epoch).
    #[serde(alias = "startedAfter")]
    pub started_after: Option<Millis>,
    /// Only runs created before this time (ms since the Unix epoch).
    #[serde(alias = "startedBefore")]
    pub started_before: Option<Millis>,
    /// Only quarantined runs (`Some(true)`) or only runs not quarantined (`Some(false)`).
    pub quarantined: Option<bool>,
    /// Only runs accepted by a world of this code version
    /// ([`WorldConfig::code_version`](crate::WorldConfig::code_version)).
    #[serde(alias = "codeVersion")]
    pub code_version: Option<String>,
    /// At most this many runs (default 100 for paged queries, unlimited for `query_workflows`).
    pub limit: Option<usize>,
    /// Skip this many matching runs first.
    pub offset: Option<usize>,
    /// Continue after this run id (from [`Page::cursor`]).
    pub cursor: Option<String>,
    /// Oldest runs first; by default the newest come first. A cursor continues in the order
    /// of the page it came from.
    #[serde(alias = "oldestFirst")]
    pub oldest_first: bool,
    /// How much data to return per run.
    #[serde(alias = "resolveData")]
    pub resolve_data: ResolveData,
}

impl WorkflowQueryFilter {
    /// A filter that matches every run.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only runs in this status or statuses.
    pub fn status(mut self, status: impl Into<StatusFilter>) -> Self {
        self.status = Some(status.into());
        self
    }

    /// Only runs of this workflow.
    pub fn workflow_name(mut self, name: impl Into<String>) -> Self {
        self.workflow_name = Some(name.into());
        self
    }

    /// Only children of this run.
    pub fn parent_id(mut self, parent: impl Into<String>) -> Self {
        self.parent_id = Some(parent.into());
        self
    }

    /// Only runs whose workflow id starts with `prefix`.
    pub fn workflow_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.workflow_id_prefix = Some(prefix.into());
        self
    }

    /// Only runs accepted by a world of code version `version`.
    pub fn code_version(mut self, version: impl Into<String>) -> Self {
        self.code_version = Some(version.into());
        self
    }

    /// Only runs created at or after `at`.
    pub fn started_after(mut self, at: Millis) -> Self {
        self.started_after = Some(at);
        self
    }

    /// Only runs created before `at`.
    pub fn started_before(mut self, at: Millis) -> Self {
        self.started_before = Some(at);
        self
    }

    /// Oldest runs first (by default the newest come first).
    pub fn oldest_first(mut self) -> Self {
        self.oldest_first = true;
        self
    }

    /// Only quarantined runs (`true`) or only runs that are not (`false`).
    pub fn quarantined(mut self, quarantined: bool) -> Self {
        self.quarantined = Some(quarantined);
        self
    }

    /// At most `limit` runs.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Skip `offset` runs.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = Some(offset);
        self
    }

    /// Continue after this run id.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// Sets how much data to return.
    pub fn resolve_data(mut self, resolve: ResolveData) -> Self {
        self.resolve_data = resolve;
        self
    }
}

/// One page of results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items on this page.
    pub data: Vec<T>,
    /// Pass this as the next filter's `cursor` to get the next page; `None` on the last page.
    pub cursor: Option<String>,
    /// True if more items follow.
    pub has_more: bool,
}

/// Which way a list runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortOrder {
    /// Oldest first: history order, command order.
    #[default]
    #[serde(alias = "asc")]
    Ascending,
    /// Newest first.
    #[serde(alias = "desc")]
    Descending,
}

/// One page of a list of a run's events, steps or hooks: where to start, how many, which way and
/// how much data.
///
/// A cursor comes from the previous page's [`Page::cursor`] and is only meaningful to the same
/// list in the same order; a cursor that is not one is refused (400).
///
/// ```
/// use worlds_engine::model::{ListQuery, ResolveData, SortOrder};
/// let query = ListQuery::new()
///     .limit(20)
///     .order(SortOrder::Descending)
///     .resolve_data(ResolveData::None);
/// assert_eq!(query.limit, Some(20));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ListQuery {
    /// At most this many items (default 100).
    pub limit: Option<usize>,
    /// Continue after the last item of the previous page (from [`Page::cursor`]).
    pub cursor: Option<String>,
    /// Which way to list (default ascending).
    #[serde(alias = "sortOrder")]
    pub order: SortOrder,
    /// Payloads kept ([`ResolveData::All`], the default) or left out.
    #[serde(alias = "resolveData")]
    pub resolve_data: ResolveData,
}

impl ListQuery {
    /// The first page, ascending, payloads kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `limit` items.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Continue after this cursor.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// Lists in this order.
    pub fn order(mut self, order: SortOrder) -> Self {
        self.order = order;
        self
    }

    /// Sets how much data to return.
    pub fn resolve_data(mut self, resolve: ResolveData) -> Self {
        self.resolve_data = resolve;
        self
    }

    /// The page size asked for, or [`DEFAULT_PAGE_SIZE`].
    pub fn page_size(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_PAGE_SIZE)
    }

    /// The cursor of a list keyed by a number (a `seq`, a position), parsed; a cursor that is
    /// not one is a 400 ([`bad_cursor`](Self::bad_cursor)).
    pub fn number_cursor<T: std::str::FromStr>(&self) -> Result<Option<T>, crate::WorldError> {
        self.cursor
            .as_deref()
            .map(|c| c.parse::<T>().map_err(|_| Self::bad_cursor(c)))
            .transpose()
    }

    /// The error for a cursor this list never gave out.
    pub fn bad_cursor(cursor: &str) -> crate::WorldError {
        crate::WorldError::invalid(
            "cursor",
            format!(
                "'{cursor}' is not a cursor of this list; pass the `cursor` of its previous page"
            ),
        )
    }
}

/// Items per page when a query sets no limit.
pub const DEFAULT_PAGE_SIZE: usize = 100;

impl<T> Page<T> {
    /// The page with each item changed by `f`, or the first error `f` returns. Cursor and
    /// `has_more` are kept.
    pub fn try_map<U, E>(self, f: impl FnMut(T) -> Result<U, E>) -> Result<Page<U>, E> {
        Ok(Page {
            data: self.data.into_iter().map(f).collect::<Result<_, E>>()?,
            cursor: self.cursor,
            has_more: self.has_more,
        })
    }

    /// One page of `items`, given in ascending order of `key`: the items past the cursor
    /// `after` in the query's order, at most its page size; the next cursor is the last item's
    /// key as `render` writes it. For stores that hold a short sorted list in memory (a run's
    /// steps, hooks or events).
    ///
    /// ```
    /// use worlds_engine::model::{ListQuery, Page, SortOrder};
    /// let query = ListQuery::new().limit(2).order(SortOrder::Descending);
    /// let page = Page::of_sorted(vec![1, 2, 3, 4], |n| *n, Some(4), |n| n.to_string(), &query);
    /// assert_eq!(page.data, vec![3, 2]);
    /// assert_eq!(page.cursor.as_deref(), Some("2"));
    /// ```
    pub fn of_sorted<K: Ord>(
        mut items: Vec<T>,
        key: impl Fn(&T) -> K,
        after: Option<K>,
        render: impl Fn(&T) -> String,
        query: &ListQuery,
    ) -> Page<T> {
        if query.order == SortOrder::Descending {
            items.reverse();
        }
        let limit = query.page_size();
        let data: Vec<T> = items
            .into_iter()
            .filter(|item| {
                after.as_ref().is_none_or(|after| match query.order {
                    SortOrder::Ascending => key(item) > *after,
                    SortOrder::Descending => key(item) < *after,
                })
            })
            .take(limit.saturating_add(1))
            .collect();
        Page::from_overfetch(data, limit, render)
    }

    /// The page made of `data`, read with one item more than `limit` to learn whether more
    /// follow: at most `limit` items, and the next cursor (`render` of the last item) if more do.
    ///
    /// ```
    /// use worlds_engine::model::Page;
    /// let page = Page::from_overfetch(vec![1, 2, 3], 2, |n| n.to_string());
    /// assert_eq!((page.data, page.cursor.as_deref(), page.has_more), (vec![1, 2], Some("2"), true));
    /// ```
    pub fn from_overfetch(
        mut data: Vec<T>,
        limit: usize,
        render: impl Fn(&T) -> String,
    ) -> Page<T> {
        let has_more = data.len() > limit;
        data.truncate(limit);
        let cursor = if has_more {
            data.last().map(render)
        } else {
            None
        };
        Page {
            data,
            cursor,
            has_more,
        }
    }

    /// The same page with each item changed by `f`.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            data: self.data.into_iter().map(f).collect(),
            cursor: self.cursor,
            has_more: self.has_more,
        }
    }
}
