//! A hand-written segment router over the catalogue: static segments before `{param}`
//! segments, no regex and no allocation per request. Method handling (405, HEAD)
//! lives in the server; this module only maps a path to an endpoint.

use crate::catalog::{Catalog, Endpoint, param_name, segments, split_slash};

/// The prefix every API path carries (the spec's `{base_url}` ends with it).
pub const API_PREFIX: &str = "/api/v1";

/// Most path parameters any template has.
const MAX_PATH_PARAMS: usize = 2;

/// A matched endpoint and the raw (still percent-encoded) path parameter values.
#[derive(Debug, Clone, Copy)]
pub struct Route<'p> {
    pub endpoint: &'static Endpoint,
    params: [&'p str; MAX_PATH_PARAMS],
    len: usize,
}

impl<'p> Route<'p> {
    /// The path parameter values, in template order.
    pub fn params(&self) -> &[&'p str] {
        &self.params[..self.len]
    }
}

#[derive(Debug, Default)]
struct Node {
    /// Children by literal segment, sorted for binary search.
    statics: Vec<(&'static str, Node)>,
    /// The child for a `{param}` segment.
    param: Option<Box<Node>>,
    /// The endpoint whose template ends here.
    endpoint: Option<&'static Endpoint>,
}

/// Maps request paths (relative to `/api/v1`) to catalogue endpoints.
#[derive(Debug)]
pub struct Router {
    root: Node,
}

impl Router {
    /// Builds the trie from every endpoint of `catalog`.
    ///
    /// # Panics
    /// When two templates are identical (a catalogue bug caught at start-up).
    pub fn new(catalog: &'static Catalog) -> Router {
        let mut root = Node::default();
        for endpoint in catalog.endpoints() {
            let mut node = &mut root;
            for segment in segments(&endpoint.path) {
                node = if param_name(segment).is_some() {
                    node.param.get_or_insert_with(Box::default)
                } else {
                    let i = match node.statics.binary_search_by(|(s, _)| (*s).cmp(segment)) {
                        Ok(i) => i,
                        Err(i) => {
                            node.statics.insert(i, (segment, Node::default()));
                            i
                        }
                    };
                    &mut node.statics[i].1
                };
            }
            assert!(
                node.endpoint.replace(endpoint).is_none(),
                "duplicate catalogue template {}",
                endpoint.path
            );
        }
        Router { root }
    }

    /// Finds the endpoint for `path` (e.g. `/stock/detail/600519`). Literal segments
    /// win over parameters; empty segments (`//`, a trailing `/`) never match.
    pub fn route<'p>(&self, path: &'p str) -> Option<Route<'p>> {
        let rest = path.strip_prefix('/')?;
        let mut params = Params {
            values: [""; MAX_PATH_PARAMS],
            len: 0,
        };
        let endpoint = walk(&self.root, rest, &mut params)?;
        Some(Route {
            endpoint,
            params: params.values,
            len: params.len,
        })
    }
}

/// Path parameter values collected while walking the trie.
struct Params<'p> {
    values: [&'p str; MAX_PATH_PARAMS],
    len: usize,
}

fn walk<'p>(node: &Node, rest: &'p str, route: &mut Params<'p>) -> Option<&'static Endpoint> {
    let (segment, tail) = split_slash(rest);
    if segment.is_empty() {
        return None;
    }
    let descend = |child: &Node, route: &mut Params<'p>| match tail {
        Some(t) => walk(child, t, route),
        None => child.endpoint,
    };
    if let Ok(i) = node.statics.binary_search_by(|(s, _)| (*s).cmp(segment))
        && let Some(found) = descend(&node.statics[i].1, route)
    {
        return Some(found);
    }
    let child = node.param.as_deref()?;
    if route.len == MAX_PATH_PARAMS {
        return None;
    }
    route.values[route.len] = segment;
    route.len += 1;
    let found = descend(child, route);
    if found.is_none() {
        route.len -= 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::catalog;

    fn router() -> Router {
        Router::new(catalog())
    }

    #[test]
    fn every_template_routes_to_itself() {
        let r = router();
        for e in catalog().endpoints() {
            let target = e.example_target();
            let path = target.split('?').next().unwrap();
            let route = r
                .route(path)
                .unwrap_or_else(|| panic!("{path} did not route"));
            assert_eq!(route.endpoint.path, e.path);
        }
    }

    #[test]
    fn literals_win_over_parameters() {
        let r = router();
        let sse = r.route("/stock/indicator/realtime/sse").unwrap();
        assert!(sse.endpoint.streaming);
        let one = r.route("/stock/indicator/realtime/600519").unwrap();
        assert_eq!(one.endpoint.path, "/stock/indicator/realtime/{code}");
        assert_eq!(one.params(), &["600519"]);
        let latest = r
            .route("/stock/shareholder/research/latest/600519")
            .unwrap();
        assert_eq!(
            latest.endpoint.path,
            "/stock/shareholder/research/latest/{code}"
        );
        // "latest" alone falls back to the parameter route (validation refuses it later).
        let fallback = r.route("/stock/shareholder/research/latest").unwrap();
        assert_eq!(fallback.endpoint.path, "/stock/shareholder/research/{code}");
        assert_eq!(fallback.params(), &["latest"]);
    }

    #[test]
    fn unknown_and_malformed_paths_do_not_route() {
        let r = router();
        for path in [
            "",
            "/",
            "/stock",
            "/stock/",
            "/stock/detail",
            "/stock/detail/",
            "/stock/detail/600519/extra",
            "/news//overview",
            "/news/overview/",
            "/nope",
            "stock/list",
        ] {
            assert!(r.route(path).is_none(), "{path} routed");
        }
    }
}
