//! Anthropic's list pages, as the Files and Skills APIs answer an
//! Anthropic client: newest first, `limit` (1 to 1,000, default 20),
//! after an id (`after_id`, or the `page` cursor of a `next_page`) or just
//! before one (`before_id`); a page names its ends (`first_id`,
//! `last_id`) and, while older rows follow, the cursor of the next
//! (`next_page`, which the SDK's cursor pages read).

use shellgate_store::Page;
use shellgate_wire::PAGE_CURSOR_PREFIX;

use crate::error::{ApiError, ApiResult};

/// Most rows in one page, and how many when the client does not say.
const MAX_PAGE: u32 = 1000;
const DEFAULT_PAGE: u32 = 20;

/// The page a list query asks for, as the store reads it.
#[derive(Debug, Clone)]
pub(crate) struct AnthropicPage {
    pub(crate) page: Page,
    /// Before `before_id`: read upwards from it, then turned around.
    backwards: bool,
}

/// A page's `first_id`, `last_id` and `next_page`.
pub(crate) type Ends = (Option<String>, Option<String>, Option<String>);

impl AnthropicPage {
    /// The page of a query's `limit`, `page`, `after_id` and `before_id`;
    /// a bad one is a 400 naming it.
    pub(crate) fn read(
        limit: Option<&str>,
        page: Option<&str>,
        after_id: Option<String>,
        before_id: Option<String>,
    ) -> ApiResult<Self> {
        let limit = match limit {
            None => DEFAULT_PAGE,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "limit",
                        format!("limit must be a whole number from 1 to {MAX_PAGE}"),
                    )
                })?,
        };
        let cursor = match page {
            Some(page) => Some(
                page.strip_prefix(PAGE_CURSOR_PREFIX)
                    .filter(|id| !id.is_empty())
                    .ok_or_else(|| ApiError::invalid("page", "page is not a next_page cursor"))?
                    .to_owned(),
            ),
            None => None,
        };
        if after_id.is_some() && before_id.is_some() {
            return Err(ApiError::invalid(
                "before_id",
                "after_id and before_id cannot both be given",
            ));
        }
        let backwards = before_id.is_some();
        Ok(AnthropicPage {
            page: Page {
                limit,
                ascending: backwards,
                after: before_id.or(after_id).or(cursor),
            },
            backwards,
        })
    }

    /// `rows` as read for this page, put newest first.
    pub(crate) fn order<T>(&self, rows: &mut [T]) {
        if self.backwards {
            rows.reverse();
        }
    }

    /// The ends of a page of `data` (newest first) and, while older rows
    /// follow (`has_more` on a forward page), the next page's cursor.
    pub(crate) fn ends<T>(&self, data: &[T], id: impl Fn(&T) -> String, has_more: bool) -> Ends {
        let first_id = data.first().map(&id);
        let last_id = data.last().map(&id);
        let next_page = last_id
            .as_ref()
            .filter(|_| has_more && !self.backwards)
            .map(|id| format!("{PAGE_CURSOR_PREFIX}{id}"));
        (first_id, last_id, next_page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_as_the_stores_page() {
        let forward = AnthropicPage::read(Some("2"), Some("page_file-1"), None, None).unwrap();
        assert_eq!(
            (
                forward.page.limit,
                forward.page.ascending,
                forward.page.after.clone()
            ),
            (2, false, Some("file-1".to_owned()))
        );
        let back = AnthropicPage::read(None, None, None, Some("file-9".into())).unwrap();
        assert_eq!((back.page.limit, back.page.ascending), (20, true));
        let mut rows = vec![1, 2, 3];
        back.order(&mut rows);
        assert_eq!(rows, [3, 2, 1]);
        assert_eq!(
            forward.ends(&["a", "b"], |s| s.to_string(), true),
            (Some("a".into()), Some("b".into()), Some("page_b".into()))
        );
        assert_eq!(back.ends(&["a"], |s| s.to_string(), true).2, None);
        for (limit, page) in [
            (Some("0"), None),
            (Some("1001"), None),
            (None, Some("file-1")),
        ] {
            assert!(AnthropicPage::read(limit, page, None, None).is_err());
        }
        assert!(AnthropicPage::read(None, None, Some("a".into()), Some("b".into())).is_err());
    }
}
