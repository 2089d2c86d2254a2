//! The shape of each endpoint's `data` as JSON Schema, read off the upstream's
//! documented example answers (docs/upstream-endpoints.json) when the document is
//! built. Which endpoints exist is the catalogue's business; an example only says
//! what an answer looks like, and a schema states no more than the examples show.
//!
//! The schemas are loose where the upstream is: every value but a row (an object
//! in an array) may be `null` (its tables are nullable: a sample row shows nulls in
//! some columns, the next row in others; a nested object is `null` where the docs
//! show one), every number is a `number` (an integer in one answer is a float in
//! another), an object's keys are all optional (the upstream answers `{}` or `[]`
//! when it has nothing) and it may carry keys the docs do not show. What a schema
//! does say (this key is a string, that one an array of objects) holds for every
//! documented answer and for the simulator's.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde_json::{Map, Value, json};

/// The docs' "more of the same" item in a cut array.
const ELLIPSIS: &str = "...";

/// Samples that are not evidence for their own endpoint: (path, the endpoint whose
/// sample the docs copied onto its page). A test checks each is still such a copy.
const COPIED: &[(&str, &str)] = &[(
    "/stock/board/info/{code}",
    "/stock/performance/ten-years/latest/{code}",
)];

/// What the examples say of one value.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    /// Only `null` was seen: the type is unknown.
    Null,
    /// Scalars of these JSON types (`boolean`, `number`, `string`).
    Scalar(BTreeSet<&'static str>),
    /// An array; its items' shape when the example shows any.
    Array(Option<Box<Shape>>),
    /// An object with these keys, in the example's order (none: its keys are
    /// undocumented).
    Object(Vec<(String, Shape)>),
    /// Values of kinds that do not merge (an object here, a string there).
    Any,
}

/// The schema of `data` in a successful answer of the endpoint at `path` (a
/// catalogue template), or `None` when the docs show no success with data for it:
/// only a failure, a placeholder string, no sample, or a sample copied from another
/// endpoint's page.
pub fn data_schema(path: &str) -> Option<Value> {
    examples().iter().find(|(p, _)| p == path).map(|(_, data)| {
        let mut schema = render(&shape(data));
        schema["description"] = "Read off the upstream's documented example.".into();
        schema
    })
}

/// The documented success `data` of each path that has one worth reading.
fn examples() -> &'static [(String, Value)] {
    static EXAMPLES: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
        crate::documented::endpoints()
            .iter()
            .filter_map(|entry| {
                let path = entry["path"].as_str()?;
                let answer = &entry["example_response"];
                let usable = answer["success"] == true
                    && !answer["data"].is_string()
                    && !COPIED.iter().any(|(copy, _)| *copy == path);
                usable.then(|| (path.to_owned(), answer["data"].clone()))
            })
            .collect()
    });
    &EXAMPLES
}

/// The shape of one example value.
fn shape(value: &Value) -> Shape {
    let scalar = |t: &'static str| Shape::Scalar(BTreeSet::from([t]));
    match value {
        Value::Null => Shape::Null,
        Value::Bool(_) => scalar("boolean"),
        Value::Number(_) => scalar("number"),
        Value::String(_) => scalar("string"),
        Value::Array(items) => Shape::Array(
            items
                .iter()
                .filter(|v| v.as_str() != Some(ELLIPSIS))
                .map(shape)
                .reduce(merge)
                .map(Box::new),
        ),
        Value::Object(map) => {
            Shape::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
    }
}

/// What two values of one place (two rows of an array) have in common.
fn merge(a: Shape, b: Shape) -> Shape {
    match (a, b) {
        (Shape::Null, other) | (other, Shape::Null) => other,
        (Shape::Scalar(mut x), Shape::Scalar(y)) => {
            x.extend(y);
            Shape::Scalar(x)
        }
        (Shape::Array(x), Shape::Array(y)) => Shape::Array(match (x, y) {
            (Some(x), Some(y)) => Some(Box::new(merge(*x, *y))),
            (x, y) => x.or(y),
        }),
        (Shape::Object(mut keys), Shape::Object(more)) => {
            for (key, value) in more {
                match keys.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, known)) => {
                        *known = merge(std::mem::replace(known, Shape::Null), value);
                    }
                    None => keys.push((key, value)),
                }
            }
            Shape::Object(keys)
        }
        _ => Shape::Any,
    }
}

/// A shape as JSON Schema (see the module's note on what is left open).
fn render(shape: &Shape) -> Value {
    render_as(shape, true)
}

/// [`render`], `null` allowed or not.
fn render_as(shape: &Shape, nullable: bool) -> Value {
    let types = |types: Vec<&str>| -> Value {
        let mut types: Vec<Value> = types.into_iter().map(Value::from).collect();
        if nullable {
            types.push("null".into());
        }
        match types.as_slice() {
            [one] => one.clone(),
            _ => Value::Array(types),
        }
    };
    match shape {
        Shape::Null | Shape::Any => json!({}),
        Shape::Scalar(kinds) => json!({ "type": types(kinds.iter().copied().collect()) }),
        Shape::Array(items) => {
            let mut schema = json!({ "type": types(vec!["array"]) });
            if let Some(items) = items {
                let row = matches!(**items, Shape::Object(_));
                schema["items"] = render_as(items, !row);
            }
            schema
        }
        Shape::Object(keys) if keys.is_empty() => {
            json!({ "type": types(vec!["object"]), "additionalProperties": true })
        }
        Shape::Object(keys) => {
            let properties: Map<String, Value> =
                keys.iter().map(|(k, v)| (k.clone(), render(v))).collect();
            json!({ "type": types(vec!["object"]), "properties": properties })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(example: Value) -> Value {
        render(&shape(&example))
    }

    #[test]
    fn scalars_are_nullable_and_numbers_are_numbers() {
        assert_eq!(of(json!(1)), json!({ "type": ["number", "null"] }));
        assert_eq!(of(json!(1.5)), json!({ "type": ["number", "null"] }));
        assert_eq!(of(json!("x")), json!({ "type": ["string", "null"] }));
        assert_eq!(of(json!(true)), json!({ "type": ["boolean", "null"] }));
        assert_eq!(
            of(json!(null)),
            json!({}),
            "a lone null says nothing of the type"
        );
    }

    #[test]
    fn array_rows_merge_and_the_ellipsis_is_dropped() {
        let rows = json!([{ "a": 1, "b": null }, { "a": "x", "b": 2, "c": [] }, "..."]);
        assert_eq!(
            of(rows),
            json!({
                "type": ["array", "null"],
                "items": {
                    "type": "object",
                    "properties": {
                        "a": { "type": ["number", "string", "null"] },
                        "b": { "type": ["number", "null"] },
                        "c": { "type": ["array", "null"] },
                    },
                },
            })
        );
        assert_eq!(of(json!(["..."])), json!({ "type": ["array", "null"] }));
        assert_eq!(
            of(json!([1, {}])),
            json!({ "type": ["array", "null"], "items": {} })
        );
    }

    #[test]
    fn an_empty_object_leaves_its_keys_open() {
        assert_eq!(
            of(json!({})),
            json!({ "type": ["object", "null"], "additionalProperties": true })
        );
    }

    #[test]
    fn failures_placeholders_and_copies_give_no_schema() {
        assert!(data_schema("/stock/detail/{code}").is_some());
        assert!(data_schema("/stock/kline").is_none(), "only a failure");
        assert!(data_schema("/market/hotmap").is_none(), "a placeholder");
        assert!(
            data_schema("/stock/indicator/realtime/sse").is_none(),
            "no sample"
        );
        assert!(
            data_schema("/stock/performance/ten-years/latest/{code}").is_some(),
            "the original of a copied sample"
        );
        assert!(
            data_schema("/stock/board/info/{code}").is_none(),
            "its copy"
        );
        assert!(data_schema("/nope").is_none());
    }

    #[test]
    fn copied_samples_are_still_copies() {
        let answer = |path: &str| {
            crate::documented::endpoints()
                .iter()
                .find(|e| e["path"] == path)
                .map(|e| e["example_response"].clone())
                .unwrap()
        };
        for (copy, original) in COPIED {
            assert_eq!(
                answer(copy),
                answer(original),
                "{copy}'s sample is its own now: read its shape"
            );
        }
    }

    #[test]
    fn every_documented_example_validates_against_its_schema() {
        for (path, data) in examples() {
            let schema = data_schema(path).unwrap();
            let without_ellipses = strip(data);
            assert!(
                valid(&schema, &without_ellipses),
                "{path}: {schema}\n{without_ellipses}"
            );
        }
    }

    /// `value` without the docs' `"..."` items.
    fn strip(value: &Value) -> Value {
        match value {
            Value::Array(items) => items
                .iter()
                .filter(|v| v.as_str() != Some(ELLIPSIS))
                .map(strip)
                .collect(),
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), strip(v))).collect(),
            other => other.clone(),
        }
    }

    /// The subset of JSON Schema [`render`] writes.
    fn valid(schema: &Value, value: &Value) -> bool {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let allowed = match &schema["type"] {
            Value::Array(types) => types.contains(&kind.into()),
            Value::String(one) => one == kind,
            _ => true,
        };
        if !allowed {
            return false;
        }
        match value {
            Value::Array(items) => items.iter().all(|v| valid(&schema["items"], v)),
            Value::Object(map) => map.iter().all(|(k, v)| valid(&schema["properties"][k], v)),
            _ => true,
        }
    }
}
