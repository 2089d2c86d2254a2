//! The simulated Hong Kong listings: 2,800 main-board and GEM codes with names,
//! industries, listing dates and price levels, the famous ones under their names.

use chrono::NaiveDate;

use super::{INDUSTRIES, NAME_HEADS, NAME_MIDS, NAME_TAILS, next_code, rng, seed_of};

/// One Hong Kong listing, main board or GEM.
#[derive(Clone, Debug)]
pub struct HkStock {
    /// Five digits (`00700`); GEM codes start with `08`.
    pub code: String,
    pub name: String,
    pub industry: usize,
    pub listed: NaiveDate,
    pub seed: u64,
    /// Price level at listing, HKD.
    pub base_price: f64,
    /// Shares issued, in units of 10,000.
    pub shares_wan: f64,
}

impl HkStock {
    /// `00700.HK`.
    pub fn full_code(&self) -> String {
        format!("{}.HK", self.code)
    }

    /// Whether it trades on the Growth Enterprise Market.
    pub fn is_gem(&self) -> bool {
        self.code.starts_with("08")
    }
}

/// Hong Kong listings kept with their real names (the K-line examples use them).
pub(super) const FAMOUS: &[(&str, &str)] = &[
    ("00700", "腾讯控股"),
    ("09988", "阿里巴巴-W"),
    ("03690", "美团-W"),
    ("00005", "汇丰控股"),
    ("01810", "小米集团-W"),
    ("00941", "中国移动"),
    ("01299", "友邦保险"),
    ("00388", "香港交易所"),
    ("09618", "京东集团-SW"),
    ("02318", "中国平安"),
];

/// Hong Kong boards: (first code, count, first listing year). GEM is 08xxx.
const HK_BOARDS: &[(u32, usize, i32)] = &[(1, 2_000, 1986), (8_001, 300, 1999), (9_001, 500, 2018)];

/// The Hong Kong listings, codes ascending, the famous ones with their names.
pub(super) fn listings(r: &mut fastrand::Rng) -> Vec<HkStock> {
    let mut hk = Vec::with_capacity(2_800);
    let famous = || FAMOUS.iter().map(|f| f.0);
    for &(first, count, first_year) in HK_BOARDS {
        let mut code = first;
        for i in 0..count {
            let code_str = format!("{code:05}");
            let seed = seed_of(&code_str) ^ 0x484B;
            let mut s = rng(seed);
            let span = (2026 - first_year).max(1) as f64;
            let year = first_year + (span * (i as f64 / count as f64)) as i32;
            let name = FAMOUS.iter().find(|f| f.0 == code_str).map_or_else(
                || {
                    format!(
                        "{}{}{}",
                        NAME_HEADS[s.usize(..NAME_HEADS.len())],
                        NAME_MIDS[s.usize(..NAME_MIDS.len())],
                        NAME_TAILS[s.usize(..NAME_TAILS.len())]
                    )
                },
                |f| f.1.to_owned(),
            );
            hk.push(HkStock {
                code: code_str,
                name,
                industry: s.usize(..INDUSTRIES.len()),
                listed: NaiveDate::from_ymd_opt(year.min(2026), s.u32(1..=12), s.u32(1..=28))
                    .expect("month 1..=12 and day 1..=28 always exist"),
                seed,
                // Penny stocks are common in Hong Kong: a long tail down to cents.
                base_price: 0.05 + s.f64().powi(4) * 400.0,
                shares_wan: 10_000.0 + s.f64().powi(2) * 5_000_000.0,
            });
            code = next_code(code, 1 + r.u32(0..3), famous());
        }
    }
    hk
}
