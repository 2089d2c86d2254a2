//! A tool result cut to what a model can read: past the cap, the longest list in
//! the data (at any depth of objects) keeps as many items as fit, the newest for
//! K-lines and series (their last), the first otherwise; if that is not enough the
//! next longest is cut too, and as a last resort the data's JSON text is cut. The
//! result says what was cut and how to ask for the rest.

use serde_json::{Value, json};

/// Lists cut before the text itself is.
const MAX_LISTS: usize = 4;
/// How deep in objects a list is looked for.
const MAX_DEPTH: usize = 6;

/// `data` within `max_chars` of JSON, and a note of the cut (`None`: nothing was
/// cut). The note names the first list cut (`list`, `kept`, `of`), any other in
/// `also`, and says `truncated` when the text had to be cut.
pub fn fit(mut data: Value, max_chars: usize, latest_last: bool) -> (Value, Option<Value>) {
    let size = |v: &Value| v.to_string().chars().count();
    if size(&data) <= max_chars {
        return (data, None);
    }
    let mut cuts: Vec<(Vec<String>, usize, usize)> = Vec::new();
    while cuts.len() < MAX_LISTS && size(&data) > max_chars {
        let done: Vec<&[String]> = cuts.iter().map(|(at, ..)| at.as_slice()).collect();
        let Some(at) = longest_list(&data, &done) else {
            break;
        };
        let (kept, total) = cut_list(&mut data, &at, max_chars, latest_last);
        cuts.push((at, kept, total));
    }
    let truncated = size(&data) > max_chars;
    if truncated {
        // Nothing left to cut by item (one huge item, a long text): the JSON text
        // itself, as a string a model reads all the same.
        data = Value::String(head(&data.to_string(), max_chars.saturating_sub(2)));
    }
    let which = if latest_last {
        "the latest"
    } else {
        "the first"
    };
    let name = |at: &[String]| {
        if at.is_empty() {
            "data".to_owned()
        } else {
            format!("data.{}", at.join("."))
        }
    };
    let mut note = match cuts.first() {
        Some((at, kept, total)) => json!({
            "list": name(at),
            "kept": kept,
            "of": total,
            "why": format!("the result is capped at {max_chars} characters: {which} {kept} of {total} items are kept"),
        }),
        None => json!({
            "why": format!("the result is capped at {max_chars} characters"),
        }),
    };
    if cuts.len() > 1 {
        note["also"] = cuts[1..]
            .iter()
            .map(|(at, kept, total)| json!({"list": name(at), "kept": kept, "of": total}))
            .collect();
    }
    if truncated {
        note["truncated"] = json!(true);
        note["why"] = json!(format!(
            "the result is capped at {max_chars} characters: its JSON text is cut there"
        ));
    }
    note["hint"] = json!(
        "narrow the request (a shorter from/to range, a smaller pageSize, or the next page) for the rest"
    );
    (data, Some(note))
}

/// Cuts the list at `at` to the most items that keep `data` within `max_chars`
/// (none, if the rest is too long already): how many it kept, of how many.
fn cut_list(
    data: &mut Value,
    at: &[String],
    max_chars: usize,
    latest_last: bool,
) -> (usize, usize) {
    let size = |v: &Value| v.to_string().chars().count();
    let list = take_list(data, at);
    let total = list.len();
    // By halving: a list of n items is tried in log n serialisations.
    let (mut low, mut high) = (0, total);
    while low < high {
        let mid = (low + high).div_ceil(2);
        put_list(data, at, kept(&list, mid, latest_last));
        if size(data) <= max_chars {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    put_list(data, at, kept(&list, low, latest_last));
    (low, total)
}

/// The start of `text` whose JSON string escapes take at most `room` characters.
fn head(text: &str, room: usize) -> String {
    let mut used = 0;
    text.chars()
        .take_while(|c| {
            used += match c {
                '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
                c if u32::from(*c) < 0x20 => 6,
                _ => 1,
            };
            used <= room
        })
        .collect()
}

fn kept(list: &[Value], n: usize, latest_last: bool) -> Vec<Value> {
    if latest_last {
        list[list.len() - n..].to_vec()
    } else {
        list[..n].to_vec()
    }
}

/// The path (object keys) of the longest list not in `done`: the data itself, or
/// a list among its objects' values, down to [`MAX_DEPTH`].
fn longest_list(data: &Value, done: &[&[String]]) -> Option<Vec<String>> {
    fn walk(
        value: &Value,
        path: &mut Vec<String>,
        done: &[&[String]],
        best: &mut Option<(usize, Vec<String>)>,
    ) {
        match value {
            Value::Array(items) => {
                let longer = best.as_ref().is_none_or(|(l, _)| items.len() > *l);
                if items.len() > 1 && longer && !done.contains(&path.as_slice()) {
                    *best = Some((items.len(), path.clone()));
                }
            }
            Value::Object(map) if path.len() < MAX_DEPTH => {
                for (key, inner) in map {
                    path.push(key.clone());
                    walk(inner, path, done, best);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut best = None;
    walk(data, &mut Vec::new(), done, &mut best);
    best.map(|(_, path)| path)
}

fn slot<'a>(data: &'a mut Value, at: &[String]) -> &'a mut Value {
    at.iter().fold(data, |v, key| &mut v[key.as_str()])
}

fn take_list(data: &mut Value, at: &[String]) -> Vec<Value> {
    match slot(data, at).take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

fn put_list(data: &mut Value, at: &[String], items: Vec<Value>) {
    *slot(data, at) = Value::Array(items);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short answer is left whole; a long one keeps the latest bars of a K-line
    /// (the first rows of a list), as many as fit, and says so.
    #[test]
    fn a_long_list_keeps_what_fits_and_says_so() {
        let small = json!({"a": [1, 2, 3]});
        assert_eq!(fit(small.clone(), 100, false), (small, None));
        let bars: Vec<Value> = (0..1000)
            .map(|i| json!({"day": i, "close": 10.5}))
            .collect();
        let data = json!({"code": "600519", "klines": bars});
        let (cut, note) = fit(data, 2_000, true);
        let note = note.expect("cut");
        assert!(cut.to_string().len() <= 2_000);
        let kept = cut["klines"].as_array().unwrap();
        assert_eq!(kept.len() as u64, note["kept"].as_u64().unwrap());
        assert_eq!(kept.last().unwrap()["day"], 999, "the latest bar is kept");
        assert_eq!(note["of"], 1000);
        assert_eq!(note["list"], "data.klines");
        let rows: Vec<Value> = (0..1000).map(|i| json!([i, "x"])).collect();
        let (cut, _) = fit(json!({"page": {"items": rows}}), 500, false);
        assert_eq!(cut["page"]["items"][0][0], 0, "the first row is kept");
    }

    /// Defect: only the longest list at the top or one level down was cut, so a
    /// list deeper down, or a second long list, left the result past the cap. Every
    /// result is within it now: lists at any depth are cut, the next longest too,
    /// and as a last resort the text.
    #[test]
    fn every_result_is_within_the_cap() {
        let rows =
            |n: usize| -> Vec<Value> { (0..n).map(|i| json!({"i": i, "x": "row"})).collect() };
        let deep = json!({"a": {"b": {"c": {"rows": rows(500)}}}});
        let (cut, note) = fit(deep, 1_000, false);
        assert!(cut.to_string().chars().count() <= 1_000);
        let note = note.unwrap();
        assert_eq!(note["list"], "data.a.b.c.rows");
        assert!(note["kept"].as_u64().unwrap() > 0);

        let two = json!({"up": rows(400), "down": rows(300)});
        let (cut, note) = fit(two, 1_000, false);
        assert!(cut.to_string().chars().count() <= 1_000);
        let note = note.unwrap();
        assert_eq!(note["list"], "data.up");
        assert_eq!(note["also"][0]["list"], "data.down");

        let huge = json!({"text": "x".repeat(5_000), "one": [1]});
        let (cut, note) = fit(huge, 1_000, false);
        assert!(
            cut.to_string().chars().count() <= 1_000,
            "{}",
            cut.to_string().len()
        );
        let note = note.unwrap();
        assert_eq!(note["truncated"], true);
        assert!(note.get("list").is_none());
        assert!(cut.as_str().unwrap().starts_with("{\""));
    }
}
