//! The tools' schemas as MCP lists them: the input schema of a tool's arguments
//! (the catalogue's types, lists of values, defaults, what each view requires, and
//! what each argument means in English and in the docs' Chinese), and the output
//! schema of its results (the views' typed response schemas).

use serde_json::{Map, Value, json};

use super::{Tool, Use};

/// What argument `name` means: its English words and the Chinese ones the docs
/// give it on the endpoints of `uses` (each once).
fn words(name: &str, uses: &[Use]) -> Option<String> {
    let mut zh: Vec<&str> = Vec::new();
    for term in uses
        .iter()
        .filter_map(|u| crate::documented::param_zh(u.path, name))
    {
        if !zh.contains(&term) {
            zh.push(term);
        }
    }
    let english = crate::words::english(name);
    match (english, zh.is_empty()) {
        (None, true) => None,
        (Some(en), true) => Some(en.to_owned()),
        (en, false) => Some(
            format!("{}（{}）", en.unwrap_or_default(), zh.join("；"))
                .trim()
                .to_owned(),
        ),
    }
}

impl Tool {
    /// The JSON schema of its arguments, from the catalogue: types, enums,
    /// defaults, which are required (by every view) and, for an argument only some
    /// views take, which.
    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        if self.chooses() {
            let names: Vec<&str> = self.views.iter().map(|(v, _)| *v).collect();
            let described: Vec<String> = self
                .endpoints()
                .map(|(v, e)| format!("{v}: {}", e.summary))
                .collect();
            properties.insert(
                self.select.into(),
                json!({
                    "type": "string",
                    "enum": names,
                    "default": names[0],
                    "description": format!("What to read. {}.", described.join("; ")),
                }),
            );
        }
        let views = self.views.len();
        for (name, uses) in self.parameters() {
            let first = uses[0].param;
            let same = uses.iter().all(|u| u.param.kind == first.kind);
            let mut schema = if same {
                crate::openapi::schema(first)
            } else {
                json!({ "type": ["string", "integer"] })
            };
            let required_by: Vec<&str> =
                uses.iter().filter(|u| u.required).map(|u| u.view).collect();
            let mut notes: Vec<String> = words(name, &uses).into_iter().collect();
            if uses.len() < views {
                let taken: Vec<&str> = uses.iter().map(|u| u.view).collect();
                notes.push(format!("Taken by {}: {}.", self.select, taken.join(", ")));
            }
            if required_by.len() == views {
                required.push(Value::from(name));
            } else if !required_by.is_empty() {
                notes.push(format!("Required by {}.", required_by.join(", ")));
            }
            if !notes.is_empty() {
                schema["description"] = notes.join(" ").into();
            }
            properties.insert(name.into(), schema);
        }
        let mut schema = Map::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), properties.into());
        if !required.is_empty() {
            schema.insert("required".into(), required.into());
        }
        schema.insert("additionalProperties".into(), false.into());
        schema
    }

    /// The schema of its results' `structuredContent` (when not an error): the
    /// data as the typed response schemas of its views say (any of them; any
    /// value where the docs show no answer), when the upstream gave it, how the
    /// cache served it, the REST request it stands for, and what was cut.
    pub fn output_schema(&self) -> Map<String, Value> {
        let mut shapes: Vec<Value> = Vec::new();
        let mut unknown = false;
        for (_, endpoint) in self.endpoints() {
            match crate::shapes::data_schema(&endpoint.path) {
                Some(schema) if !shapes.contains(&schema) => shapes.push(schema),
                Some(_) => {}
                None => unknown = true,
            }
        }
        let data = match shapes.len() {
            0 => json!({}),
            _ if unknown => json!({}),
            1 => shapes.remove(0),
            _ => json!({ "anyOf": shapes }),
        };
        let properties = json!({
                "data": data,
                "asOf": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the upstream gave this answer (RFC 3339, UTC).",
                },
                "cache": {
                    "type": "string",
                    "enum": ["hit", "stale", "miss"],
                    "description": "How the cache served it: hit (fresh), stale (past its freshness) or miss (fetched for this call).",
                },
                "source": {
                    "type": "string",
                    "description": "The REST request this call stands for, or the quote hub's poll.",
                },
                "cut": {
                    "type": "object",
                    "description": "Present when the result was cut to fit: which list, how many items were kept of how many, and how to ask for the rest.",
                },
        });
        let mut schema = Map::new();
        schema.insert("type".into(), "object".into());
        schema.insert("properties".into(), properties);
        schema.insert(
            "required".into(),
            json!(["data", "asOf", "cache", "source"]),
        );
        schema
    }
}
