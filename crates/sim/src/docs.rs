//! The simulator's routes, read from the upstream's documented list
//! (docs/upstream-endpoints.json) with a matcher of its own, and what the documented
//! parameters allow. The proxy's catalogue and router are not used here: the two
//! sides read the same documentation separately, so a mistake on one side shows.

use std::sync::LazyLock;

use serde_json::Value;

use super::refusal::Refusal;

/// The documented list, as the docs' generator wrote it.
const DOCUMENTED: &str = include_str!("../../../docs/upstream-endpoints.json");

/// What one documented parameter allows.
#[derive(Debug)]
pub struct ParamSpec {
    pub name: String,
    /// `path`, `query` or `body`.
    pub place: String,
    pub required: bool,
    /// `number`, `boolean`, `string` or absent.
    pub kind: Option<String>,
    pub values: Option<Vec<String>>,
    pub range: Option<(i64, i64)>,
}

/// One documented endpoint.
#[derive(Debug)]
pub struct Route {
    pub method: String,
    /// The path template, `/stock/detail/{code}`.
    pub template: &'static str,
    segments: Vec<Segment>,
    pub params: Vec<ParamSpec>,
    /// The documented sample request's target (relative to `/api/v1`), if any.
    #[cfg_attr(not(test), expect(dead_code, reason = "the tests send it"))]
    pub sample: Option<String>,
    /// The documented example answer's `data`, when it is a success.
    pub example: Option<Value>,
    /// The docs removed it (the old `/market/flow` paths): the upstream answers it
    /// as a path it does not know.
    pub retired: bool,
}

#[derive(Debug)]
enum Segment {
    Literal(String),
    Param,
}

/// Every documented route, in the documented list's order.
pub fn routes() -> &'static [Route] {
    static ROUTES: LazyLock<Vec<Route>> = LazyLock::new(|| {
        let list: Vec<Value> =
            serde_json::from_str(DOCUMENTED).expect("the documented list is JSON");
        list.iter().map(read_route).collect()
    });
    &ROUTES
}

fn read_route(entry: &Value) -> Route {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let template: &'static str = Box::leak(text(&entry["path"]).expect("a path").into_boxed_str());
    let segments = template
        .split('/')
        .skip(1)
        .map(|s| {
            if s.starts_with('{') {
                Segment::Param
            } else {
                Segment::Literal(s.to_owned())
            }
        })
        .collect();
    let params = entry["params"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| ParamSpec {
            name: text(&p["name"]).unwrap_or_default(),
            place: text(&p["in"]).unwrap_or_default(),
            required: p["required"].as_bool().unwrap_or(false),
            kind: text(&p["type"]),
            values: p["enum"]
                .as_array()
                .map(|vs| vs.iter().filter_map(text).collect()),
            range: p["range"]
                .as_array()
                .and_then(|r| Some((r.first()?.as_i64()?, r.get(1)?.as_i64()?))),
        })
        .collect();
    let sample = entry["sample_request"].as_str().and_then(|line| {
        let (_, target) = line.split_once(' ')?;
        Some(target.strip_prefix("/api/v1")?.to_owned())
    });
    let example = (entry["example_response"]["success"] == true)
        .then(|| entry["example_response"]["data"].clone())
        .filter(|data| !data.is_string());
    let retired = entry["example_notes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|note| note.as_str().is_some_and(|n| n.starts_with("removed")));
    Route {
        method: text(&entry["method"]).unwrap_or_default(),
        template,
        segments,
        params,
        sample,
        example,
        retired,
    }
}

/// The route of `method` and `path` (relative to `/api/v1`): its position and the
/// raw path parameter values. A literal segment wins over a parameter.
pub fn route(path: &str) -> Option<(usize, Vec<&str>)> {
    let parts: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let mut best: Option<(usize, usize, Vec<&str>)> = None;
    for (i, route) in routes().iter().enumerate() {
        if route.segments.len() != parts.len() {
            continue;
        }
        let mut literals = 0;
        let mut values = Vec::new();
        let fits = route
            .segments
            .iter()
            .zip(&parts)
            .all(|(seg, part)| match seg {
                Segment::Literal(l) => {
                    literals += 1;
                    l == part
                }
                Segment::Param => {
                    values.push(*part);
                    !part.is_empty()
                }
            });
        if fits && best.as_ref().is_none_or(|(_, l, _)| literals > *l) {
            best = Some((i, literals, values));
        }
    }
    best.map(|(i, _, values)| (i, values))
}

/// The position of the route of `template` (a documented path template).
pub fn position(template: &str) -> Option<usize> {
    routes().iter().position(|r| r.template == template)
}

impl Route {
    /// What the upstream refuses, read as a NestJS validation pipe would from the
    /// docs: a query parameter the docs do not list (the key's query form aside), a
    /// required one missing or empty, a value outside its enum or range, a number
    /// that is not one. An empty value is not absent there (class-validator's
    /// `@IsOptional` skips only null and undefined): empty is refused where an enum,
    /// a number or a boolean is expected, and is an (empty) string elsewhere, which
    /// the services read as absent.
    ///
    /// # Errors
    /// `Refusal::BadRequest` naming nothing (the upstream's text names nothing).
    pub fn check(&self, query: &[(String, String)]) -> Result<(), Refusal> {
        for (name, value) in query {
            if name == "x-api-key" {
                continue;
            }
            let Some(spec) = self
                .params
                .iter()
                .find(|p| p.place == "query" && p.name == *name)
            else {
                return Err(Refusal::BadRequest);
            };
            if value.is_empty() {
                let typed = spec.values.is_some()
                    || matches!(spec.kind.as_deref(), Some("number" | "boolean"));
                if typed {
                    return Err(Refusal::BadRequest);
                }
                continue;
            }
            if let Some(values) = &spec.values
                && !values.iter().any(|v| v == value)
            {
                return Err(Refusal::BadRequest);
            }
            if spec.kind.as_deref() == Some("number") {
                let n: i64 = value.parse().map_err(|_| Refusal::BadRequest)?;
                if let Some((min, max)) = spec.range
                    && !(min..=max).contains(&n)
                {
                    return Err(Refusal::BadRequest);
                }
            }
            if spec.kind.as_deref() == Some("boolean")
                && !matches!(value.as_str(), "true" | "false")
            {
                return Err(Refusal::BadRequest);
            }
        }
        let given = |name: &str| query.iter().any(|(n, v)| n == name && !v.trim().is_empty());
        for spec in &self.params {
            if spec.place == "query" && spec.required && !given(&spec.name) {
                return Err(Refusal::BadRequest);
            }
        }
        // The docs' "one of subjectKey / subjectId".
        if self.template == "/news/topic-subject" && !given("subjectKey") && !given("subjectId") {
            return Err(Refusal::BadRequest);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_endpoint_is_a_route() {
        assert_eq!(routes().len(), 94);
        let (i, values) = route("/stock/detail/600519").unwrap();
        assert_eq!(routes()[i].template, "/stock/detail/{code}");
        assert_eq!(values, ["600519"]);
        let (i, _) = route("/stock/shareholder/research/latest/600519").unwrap();
        assert_eq!(
            routes()[i].template,
            "/stock/shareholder/research/latest/{code}"
        );
        let (i, _) = route("/stock/indicator/realtime/sse").unwrap();
        assert_eq!(routes()[i].template, "/stock/indicator/realtime/sse");
        assert!(route("/stock/nope").is_none());
        assert!(route("/stock/detail/").is_none());
    }

    #[test]
    fn undocumented_parameters_and_values_are_refused() {
        let kline = &routes()[position("/stock/kline").unwrap()];
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(
            kline
                .check(&q(&[("code", "600519"), ("period", "5m")]))
                .is_ok()
        );
        assert!(
            kline
                .check(&q(&[("code", "600519"), ("period", "2m")]))
                .is_err()
        );
        assert!(
            kline.check(&q(&[("period", "day")])).is_err(),
            "code is required"
        );
        assert!(
            kline
                .check(&q(&[("code", "600519"), ("fields", "f2")]))
                .is_err()
        );
        assert!(
            kline
                .check(&q(&[("code", "600519"), ("x-api-key", "k")]))
                .is_ok()
        );
        let topic = &routes()[position("/news/topic-subject").unwrap()];
        assert!(topic.check(&q(&[("pageSize", "5")])).is_err());
        assert!(topic.check(&q(&[("subjectId", "1137")])).is_ok());
    }
}
