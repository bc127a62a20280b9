//! Pages of a list, and how a caller asks for one.

use serde::{Deserialize, Serialize};
use worlds_engine::model::{Page, ResolveData, SortOrder};

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PageBody<T> {
    /// The items.
    pub data: Vec<T>,
    /// Pass as `cursor` for the next page; null on the last.
    pub cursor: Option<String>,
    /// True if more items follow.
    pub has_more: bool,
}

impl<T> PageBody<T> {
    /// The same page with each item changed by `f`.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> PageBody<U> {
        PageBody {
            data: self.data.into_iter().map(f).collect(),
            cursor: self.cursor,
            has_more: self.has_more,
        }
    }
}

impl<T> From<Page<T>> for PageBody<T> {
    fn from(page: Page<T>) -> Self {
        PageBody {
            data: page.data,
            cursor: page.cursor,
            has_more: page.has_more,
        }
    }
}

impl<T> From<PageBody<T>> for Page<T> {
    fn from(page: PageBody<T>) -> Self {
        Page {
            data: page.data,
            cursor: page.cursor,
            has_more: page.has_more,
        }
    }
}

/// Paging of a run's events, steps and hooks: `?cursor=&limit=&order=&resolve=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    /// The `cursor` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// `ascending` (the default) or `descending`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>))]
    pub order: Option<SortOrder>,
    /// `all` (the default) includes payloads; `none` leaves them out.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>))]
    pub resolve: Option<ResolveData>,
}
