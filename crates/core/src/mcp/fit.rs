//! A tool result cut to what a model can read: past the cap, the longest list in
//! the data (at its top or one level down) keeps as many items as fit, the newest
//! for K-lines and series (their last), the first otherwise, and the result says
//! what was cut and how to ask for the rest.

use serde_json::{Value, json};

/// `data` within `max_chars` of JSON if cutting its longest list can make it so,
/// and a note of the cut (`None`: nothing was cut).
pub fn fit(mut data: Value, max_chars: usize, latest_last: bool) -> (Value, Option<Value>) {
    let size = |v: &Value| v.to_string().chars().count();
    if size(&data) <= max_chars {
        return (data, None);
    }
    let Some(at) = longest_list(&data) else {
        return (data, None);
    };
    let list = take_list(&mut data, &at);
    let total = list.len();
    // The most items that fit, by halving: a list of n items is tried in log n
    // serialisations.
    let (mut low, mut high) = (0, total);
    while low < high {
        let mid = (low + high).div_ceil(2);
        put_list(&mut data, &at, kept(&list, mid, latest_last));
        if size(&data) <= max_chars {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    put_list(&mut data, &at, kept(&list, low, latest_last));
    let which = if latest_last {
        "the latest"
    } else {
        "the first"
    };
    let note = json!({
        "list": if at.is_empty() { "data".to_owned() } else { format!("data.{}", at.join(".")) },
        "kept": low,
        "of": total,
        "why": format!("the result is capped at {max_chars} characters: {which} {low} of {total} items are kept"),
        "hint": "narrow the request (a shorter from/to range, a smaller pageSize, or the next page) for the rest",
    });
    (data, Some(note))
}

fn kept(list: &[Value], n: usize, latest_last: bool) -> Vec<Value> {
    if latest_last {
        list[list.len() - n..].to_vec()
    } else {
        list[..n].to_vec()
    }
}

/// The path (object keys) of the longest list: the data itself, or a value of it,
/// or a value of one of those.
fn longest_list(data: &Value) -> Option<Vec<String>> {
    let mut best: Option<(usize, Vec<String>)> = None;
    let mut consider = |len: usize, path: Vec<String>| {
        if len > 1 && best.as_ref().is_none_or(|(l, _)| len > *l) {
            best = Some((len, path));
        }
    };
    match data {
        Value::Array(items) => consider(items.len(), Vec::new()),
        Value::Object(map) => {
            for (key, value) in map {
                match value {
                    Value::Array(items) => consider(items.len(), vec![key.clone()]),
                    Value::Object(inner) => {
                        for (k, v) in inner {
                            if let Value::Array(items) = v {
                                consider(items.len(), vec![key.clone(), k.clone()]);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
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
}
