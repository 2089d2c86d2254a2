//! The board: the latest quote of every subscribed code, one per poll (a tick),
//! published whole through a `watch` channel and shared by every stream. A new
//! board is the last one with a poll's rows laid over it; a code whose row did not
//! change keeps its quote (and the tick it last changed at).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::hub::port::Code;

/// The latest quote of every subscribed code.
#[derive(Debug, Default)]
pub(crate) struct Board {
    /// Increases with every poll.
    pub(super) tick: u64,
    /// Keyed by the address of the registry's one copy of each code, which every
    /// subscriber of the code shares: each subscriber looks up each of its codes here
    /// on every tick, and hashing and comparing a pointer costs a fraction of a
    /// string's (the string sits elsewhere in memory, a cache miss per code). The
    /// entry holds that copy, so its address is not reused while the board lives.
    quotes: foldhash::HashMap<usize, Entry>,
    /// When the poll that made it was answered (none before the first).
    pub(super) polled_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The hub stops: every stream ends when it sees this board. Streams learn of
    /// the stop here rather than each from the stop token, whose check takes a lock
    /// shared by every stream on each of their wakes.
    pub(super) closing: bool,
}

#[derive(Debug)]
struct Entry {
    /// Keeps the key's address taken.
    _code: Code,
    quote: Arc<Quote>,
}

/// One code's quote on a board.
#[derive(Debug)]
pub(super) struct Quote {
    /// The tick at which this quote last changed.
    pub(super) changed_at: u64,
    /// The upstream's row for this code, as one line of JSON.
    pub(super) json: Bytes,
}

/// A code's key on the board: the address of its shared copy.
fn address(code: &Code) -> usize {
    Arc::as_ptr(code).cast::<u8>() as usize
}

impl Board {
    /// The quote of `code` (the registry's shared copy), if it has one.
    pub(super) fn quote(&self, code: &Code) -> Option<&Quote> {
        self.quotes.get(&address(code)).map(|e| &*e.quote)
    }

    /// The next board: quotes of `codes` (those still subscribed), updated where
    /// `rows` (by canonical code) holds something different.
    pub(super) fn next(&self, codes: &[Code], rows: &HashMap<String, Bytes>) -> Board {
        let tick = self.tick + 1;
        let mut quotes =
            foldhash::HashMap::with_capacity_and_hasher(codes.len(), Default::default());
        for code in codes {
            let prev = self.quotes.get(&address(code)).map(|e| &e.quote);
            let quote = match (rows.get(&**code), prev) {
                (Some(json), Some(prev)) if *json == prev.json => Arc::clone(prev),
                (Some(json), _) => Arc::new(Quote {
                    changed_at: tick,
                    json: json.clone(),
                }),
                (None, Some(prev)) => Arc::clone(prev),
                (None, None) => continue,
            };
            let entry = Entry {
                _code: Arc::clone(code),
                quote,
            };
            quotes.insert(address(code), entry);
        }
        Board {
            tick,
            quotes,
            polled_at: self.polled_at,
            closing: false,
        }
    }

    /// The board that ends every stream (the hub stops), at this board's tick.
    pub(super) fn closing(&self) -> Board {
        Board {
            tick: self.tick,
            quotes: Default::default(),
            polled_at: self.polled_at,
            closing: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row that did not change keeps its quote and the tick it changed at; a code
    /// without a row keeps its last quote; a code no longer subscribed drops out.
    #[test]
    fn a_board_keeps_what_did_not_change() {
        let (a, b, c): (Code, Code, Code) = ("600519".into(), "000001".into(), "300750".into());
        let rows = |pairs: &[(&str, &str)]| -> HashMap<String, Bytes> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Bytes::copy_from_slice(v.as_bytes())))
                .collect()
        };
        let first = Board::default().next(
            &[a.clone(), b.clone(), c.clone()],
            &rows(&[("600519", "1"), ("000001", "2")]),
        );
        assert_eq!(first.tick, 1);
        assert!(first.quote(&c).is_none(), "no row, no quote");
        let second = first.next(
            &[a.clone(), b.clone()],
            &rows(&[("600519", "1"), ("000001", "3"), ("300750", "9")]),
        );
        assert_eq!(second.quote(&a).unwrap().changed_at, 1, "unchanged");
        assert_eq!(second.quote(&b).unwrap().changed_at, 2);
        assert_eq!(&second.quote(&b).unwrap().json[..], b"3");
        assert!(second.quote(&c).is_none(), "not subscribed");
        let third = second.next(&[a.clone(), b.clone()], &HashMap::new());
        assert_eq!(&third.quote(&b).unwrap().json[..], b"3", "kept");
        let closing = third.closing();
        assert!(closing.closing && closing.tick == 3 && closing.quote(&a).is_none());
        // Another copy of the same text is another code: keys are the shared copy.
        let other: Code = "600519".into();
        assert!(third.quote(&other).is_none());
    }
}
