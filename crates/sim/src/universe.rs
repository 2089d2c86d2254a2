//! The simulated market's universe: about 5,400 A-shares and 1,000 ETFs with names,
//! exchanges, industries, regions, concepts and listing dates, 2,800 Hong Kong
//! listings (main board and GEM), plus the board lists. Built once,
//! deterministically, from fixed seeds.

mod hk;

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::NaiveDate;

pub use hk::HkStock;

/// A small deterministic generator (seeded per purpose, so adding a field to one data
/// set never shifts another's values).
pub(crate) fn rng(seed: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed)
}

/// A stable 64-bit hash of a string (FNV-1a), used to seed per-code data.
pub(crate) fn seed_of(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Exchange of a listed security.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    Sh,
    Sz,
    Bj,
}

impl Exchange {
    /// `SH`, `SZ` or `BJ`.
    pub fn suffix(self) -> &'static str {
        match self {
            Exchange::Sh => "SH",
            Exchange::Sz => "SZ",
            Exchange::Bj => "BJ",
        }
    }
    /// Eastmoney market digit: 1 = SH, 0 = SZ and BJ.
    pub fn market(self) -> u8 {
        match self {
            Exchange::Sh => 1,
            Exchange::Sz | Exchange::Bj => 0,
        }
    }
}

/// One A-share.
#[derive(Clone, Debug)]
pub struct Stock {
    /// Six digits.
    pub code: String,
    pub exchange: Exchange,
    pub name: String,
    pub industry: usize,
    pub region: usize,
    pub concepts: Vec<usize>,
    pub styles: Vec<usize>,
    pub listed: NaiveDate,
    /// Seed for prices and everything else per stock.
    pub seed: u64,
    /// Price level at listing, CNY.
    pub base_price: f64,
    /// Total shares, in units of 10,000.
    pub shares_wan: f64,
}

impl Stock {
    /// `600519.SH`.
    pub fn full_code(&self) -> String {
        format!("{}.{}", self.code, self.exchange.suffix())
    }
    /// Daily price limit as a fraction (10 % main board, 20 % STAR/ChiNext, 30 % BSE).
    pub fn limit(&self) -> f64 {
        match (&self.code[..2], self.exchange) {
            (_, Exchange::Bj) => 0.30,
            ("68" | "30", _) => 0.20,
            _ => 0.10,
        }
    }
}

/// One exchange-traded fund.
#[derive(Clone, Debug)]
pub struct Etf {
    pub code: String,
    pub exchange: Exchange,
    pub name: String,
    /// Index it tracks (position in [`TRACKED_INDICES`]).
    pub index: usize,
    pub company: &'static str,
    pub listed: NaiveDate,
    pub seed: u64,
    pub base_price: f64,
}

impl Etf {
    /// `510300.SH`.
    pub fn full_code(&self) -> String {
        format!("{}.{}", self.code, self.exchange.suffix())
    }
}

/// Well-known stocks kept with their real names so that examples read naturally.
const FAMOUS: &[(&str, &str, &str)] = &[
    ("600519", "贵州茅台", "酿酒行业"),
    ("000001", "平安银行", "银行"),
    ("600000", "浦发银行", "银行"),
    ("601318", "中国平安", "保险"),
    ("600887", "伊利股份", "食品饮料"),
    ("600036", "招商银行", "银行"),
    ("000002", "万科A", "房地产开发"),
    ("000858", "五粮液", "酿酒行业"),
    ("300750", "宁德时代", "电池"),
    ("002594", "比亚迪", "汽车整车"),
    ("600030", "中信证券", "证券"),
    ("601398", "工商银行", "银行"),
    ("600276", "恒瑞医药", "化学制药"),
    ("000333", "美的集团", "家电行业"),
    ("688981", "中芯国际", "半导体"),
    ("601012", "隆基绿能", "光伏设备"),
    ("300059", "东方财富", "证券"),
];

/// ETFs every simulated universe holds (examples and tests use them).
const FAMOUS_ETFS: &[&str] = &["510050", "510300", "512880", "588000", "159915", "159919"];

/// The code after `code`: a random gap, but never past a code that must exist.
fn next_code<'a>(code: u32, gap: u32, must: impl Iterator<Item = &'a str>) -> u32 {
    must.filter_map(|c| c.parse::<u32>().ok())
        .filter(|&c| c > code && c < code + gap)
        .min()
        .unwrap_or(code + gap)
}

/// Industry boards (Eastmoney-style names).
pub const INDUSTRIES: &[&str] = &[
    "银行",
    "证券",
    "保险",
    "多元金融",
    "酿酒行业",
    "食品饮料",
    "化学制药",
    "中药",
    "生物制品",
    "医疗器械",
    "医疗服务",
    "半导体",
    "电子元件",
    "消费电子",
    "光学光电子",
    "通信设备",
    "计算机设备",
    "软件开发",
    "互联网服务",
    "游戏",
    "文化传媒",
    "电池",
    "光伏设备",
    "风电设备",
    "电网设备",
    "电源设备",
    "汽车整车",
    "汽车零部件",
    "家电行业",
    "房地产开发",
    "工程建设",
    "水泥建材",
    "装修建材",
    "钢铁行业",
    "有色金属",
    "贵金属",
    "煤炭行业",
    "石油行业",
    "燃气",
    "电力行业",
    "化学制品",
    "化学原料",
    "化纤行业",
    "塑料制品",
    "橡胶制品",
    "农药兽药",
    "化肥行业",
    "农牧饲渔",
    "纺织服装",
    "商业百货",
    "旅游酒店",
    "航运港口",
    "物流行业",
    "铁路公路",
    "航空机场",
    "船舶制造",
    "航天航空",
    "专用设备",
    "通用设备",
    "仪器仪表",
    "工程机械",
    "环保行业",
    "造纸印刷",
    "包装材料",
    "珠宝首饰",
    "教育",
    "贸易行业",
    "家用轻工",
    "美容护理",
    "综合行业",
    "公用事业",
    "能源金属",
    "小金属",
    "非金属材料",
    "玻璃玻纤",
    "采掘行业",
    "交运设备",
    "电机",
    "电子化学品",
    "医药商业",
    "通信服务",
    "装修装饰",
    "光伏辅材",
    "储能设备",
    "工业母机",
    "机器人",
];

/// Region boards: provinces, autonomous regions and municipalities.
pub const REGIONS: &[&str] = &[
    "北京板块",
    "天津板块",
    "河北板块",
    "山西板块",
    "内蒙古板块",
    "辽宁板块",
    "吉林板块",
    "黑龙江",
    "上海板块",
    "江苏板块",
    "浙江板块",
    "安徽板块",
    "福建板块",
    "江西板块",
    "山东板块",
    "河南板块",
    "湖北板块",
    "湖南板块",
    "广东板块",
    "广西板块",
    "海南板块",
    "重庆板块",
    "四川板块",
    "贵州板块",
    "云南板块",
    "西藏板块",
    "陕西板块",
    "甘肃板块",
    "青海板块",
    "宁夏板块",
    "新疆板块",
];

const CONCEPT_BASES: &[&str] = &[
    "人工智能",
    "芯片",
    "新能源车",
    "锂电池",
    "储能",
    "光伏",
    "氢能源",
    "机器人",
    "数据中心",
    "云计算",
    "5G",
    "6G",
    "元宇宙",
    "虚拟现实",
    "区块链",
    "数字货币",
    "网络安全",
    "信创",
    "国产软件",
    "大数据",
    "物联网",
    "工业互联",
    "智能驾驶",
    "无人机",
    "低空经济",
    "商业航天",
    "卫星导航",
    "军工",
    "核电",
    "风能",
    "特高压",
    "充电桩",
    "固态电池",
    "钠离子电池",
    "钙钛矿",
    "HJT电池",
    "碳中和",
    "节能环保",
    "污水处理",
    "生物医药",
    "创新药",
    "CRO",
    "医美",
    "养老",
    "预制菜",
    "白酒",
    "乳业",
    "跨境电商",
    "直播电商",
    "短剧游戏",
    "AIGC",
    "算力",
    "CPO",
    "液冷",
    "PCB",
    "存储芯片",
    "光刻机",
    "第三代半导体",
    "稀土永磁",
    "黄金",
    "一带一路",
    "国企改革",
    "中特估",
    "高股息",
    "破净股",
];

const CONCEPT_SUFFIXES: &[&str] = &["", "概念", "产业链", "应用", "设备", "材料", "服务"];

/// Style boards.
pub const STYLES: &[&str] = &[
    "大盘股",
    "中盘股",
    "小盘股",
    "微盘股",
    "高股息",
    "破净股",
    "低价股",
    "高价股",
    "融资融券",
    "沪股通",
    "深股通",
    "MSCI中国",
    "富时罗素",
    "标准普尔",
    "上证50",
    "沪深300",
    "中证500",
    "中证1000",
    "机构重仓",
    "基金重仓",
    "QFII重仓",
    "社保重仓",
    "预盈预增",
    "预亏预减",
    "昨日涨停",
    "昨日连板",
    "次新股",
    "专精特新",
];

/// Indices that ETFs track: name, code as the upstream writes it, constituents.
pub const TRACKED_INDICES: &[(&str, &str, u32)] = &[
    ("沪深300", "000300.SH", 300),
    ("中证500", "000905.SH", 500),
    ("上证50", "000016.SH", 50),
    ("创业板指", "399006.SZ", 100),
    ("科创50", "000688.SH", 50),
    ("中证1000", "000852.SH", 1000),
    ("中证红利", "000922.SH", 100),
    ("证券公司", "399975.SZ", 50),
    ("半导体", "931865.SH", 50),
    ("中证医疗", "399989.SZ", 100),
    ("新能源车", "399976.SZ", 50),
    ("光伏产业", "931151.SH", 50),
    ("中证军工", "399967.SZ", 80),
    ("中证白酒", "399997.SZ", 20),
    ("中证银行", "399986.SZ", 42),
    ("恒生科技", "HSTECH.HI", 30),
    ("纳斯达克100", "NDX.GI", 100),
    ("标普500", "SPX.GI", 500),
    ("黄金", "AU9999.SGE", 1),
    ("中证消费", "000932.SH", 50),
    ("中证传媒", "399971.SZ", 50),
    ("人工智能", "931071.SH", 50),
    ("机器人", "931590.SH", 50),
    ("云计算", "930851.SH", 50),
    ("中证煤炭", "399998.SZ", 30),
    ("有色金属", "930708.SH", 50),
    ("中证电力", "931994.SH", 50),
    ("房地产", "931775.SH", 50),
    ("创业板50", "399673.SZ", 50),
    ("科创芯片", "000685.SH", 50),
    ("恒生指数", "HSI.HI", 82),
    ("日经225", "N225.GI", 225),
    ("德国DAX", "GDAXI.GI", 40),
    ("中证2000", "932000.SH", 2000),
    ("央企红利", "000825.SH", 50),
];

/// The province or municipality of a region board (`安徽板块` → `安徽省`), as the
/// screening table's `AREA` and the area list write it.
pub fn province(region: usize) -> String {
    let base = REGIONS[region].trim_end_matches("板块");
    let suffix = match base {
        "北京" | "天津" | "上海" | "重庆" => "市",
        "内蒙古" | "广西" | "西藏" | "宁夏" | "新疆" => "自治区",
        _ => "省",
    };
    format!("{base}{suffix}")
}

/// The industry-classification code of an industry (`D017013001` style).
pub fn industry_code(industry: usize) -> String {
    format!("D017{:03}{:03}", 1 + industry / 10, 1 + industry % 10)
}

const FUND_COMPANIES: &[&str] = &[
    "华夏",
    "易方达",
    "南方",
    "华泰柏瑞",
    "嘉实",
    "广发",
    "国泰",
    "富国",
    "汇添富",
    "招商",
    "博时",
    "天弘",
    "鹏华",
    "银华",
    "工银",
    "景顺",
    "华宝",
    "平安",
    "国联安",
    "万家",
];

const NAME_HEADS: &[&str] = &[
    "华", "中", "东", "南", "西", "北", "金", "新", "宏", "海", "天", "泰", "恒", "永", "长", "福",
    "安", "嘉", "盛", "瑞", "通", "联", "国", "信", "兴", "达", "科", "光", "明", "鑫", "凯", "博",
    "正", "德",
];

const NAME_MIDS: &[&str] = &[
    "润", "业", "源", "远", "城", "阳", "宇", "晨", "辰", "峰", "川", "鼎", "丰", "诚", "和", "康",
    "力", "能", "微", "芯", "电", "创", "智", "威", "航", "汇", "祥", "达", "利", "邦", "普", "亚",
    "星", "锦",
];

const NAME_TAILS: &[&str] = &[
    "科技", "股份", "电子", "医药", "新材", "智能", "控股", "集团", "能源", "精工", "环境", "传媒",
    "生物", "电气", "重工", "化工", "食品", "药业", "软件", "信息", "装备", "光电", "微电", "汽车",
    "银行", "证券",
];

/// Board ranges: (first code, count, exchange, first listing year).
const BOARDS: &[(u32, usize, Exchange, i32)] = &[
    (600_000, 1_650, Exchange::Sh, 1990),
    (688_001, 580, Exchange::Sh, 2019),
    (1, 1_520, Exchange::Sz, 1991),
    (300_001, 1_380, Exchange::Sz, 2009),
    (920_001, 280, Exchange::Bj, 2021),
];

/// Everything the simulator knows about the market.
#[derive(Debug)]
pub struct Universe {
    pub stocks: Vec<Stock>,
    pub etfs: Vec<Etf>,
    /// Hong Kong listings, by code.
    pub hk: Vec<HkStock>,
    pub concepts: Vec<String>,
    by_code: HashMap<String, usize>,
    etf_by_code: HashMap<String, usize>,
    hk_by_code: HashMap<String, usize>,
}

static UNIVERSE: LazyLock<Universe> = LazyLock::new(Universe::build);

/// The universe (built on first use, in a few milliseconds).
pub fn universe() -> &'static Universe {
    &UNIVERSE
}

impl Universe {
    fn build() -> Universe {
        let concepts: Vec<String> = CONCEPT_SUFFIXES
            .iter()
            .flat_map(|sfx| CONCEPT_BASES.iter().map(move |b| format!("{b}{sfx}")))
            .take(440)
            .collect();
        let mut r = rng(0x5743_4b53);
        let stocks = stocks(&mut r, concepts.len());
        let etfs = etfs(&mut r);
        let hk = hk::listings(&mut r);
        let hk_by_code = hk
            .iter()
            .enumerate()
            .map(|(i, s)| (s.code.clone(), i))
            .collect();
        let by_code = stocks
            .iter()
            .enumerate()
            .map(|(i, s)| (s.code.clone(), i))
            .collect();
        let etf_by_code = etfs
            .iter()
            .enumerate()
            .map(|(i, e)| (e.code.clone(), i))
            .collect();
        Universe {
            stocks,
            etfs,
            hk,
            concepts,
            by_code,
            etf_by_code,
            hk_by_code,
        }
    }

    /// A stock by code, with or without suffix (`600519` or `600519.SH`).
    pub fn stock(&self, code: &str) -> Option<&Stock> {
        let digits = code.split('.').next().unwrap_or(code);
        self.by_code.get(digits).map(|&i| &self.stocks[i])
    }

    /// An ETF by code, with or without suffix.
    pub fn etf(&self, code: &str) -> Option<&Etf> {
        let digits = code.split('.').next().unwrap_or(code);
        self.etf_by_code.get(digits).map(|&i| &self.etfs[i])
    }

    /// A Hong Kong listing by its five digits.
    pub fn hk(&self, code: &str) -> Option<&HkStock> {
        self.hk_by_code.get(code).map(|&i| &self.hk[i])
    }
}

/// The A-share listings, board by board, drawing code gaps from `r`; each stock's
/// own figures come from its code's seed (`concepts`: how many concepts there are).
fn stocks(r: &mut fastrand::Rng, concepts: usize) -> Vec<Stock> {
    let mut stocks = Vec::with_capacity(5_410);
    for &(first, count, exchange, first_year) in BOARDS {
        let mut code = first;
        for i in 0..count {
            let code_str = format!("{code:06}");
            let seed = seed_of(&code_str);
            let mut s = rng(seed);
            // Older codes listed earlier: spread listing dates over the board's life.
            let span = (2026 - first_year).max(1) as f64;
            let year = first_year + (span * (i as f64 / count as f64).powf(1.3)) as i32;
            let listed = NaiveDate::from_ymd_opt(year.min(2026), s.u32(1..=12), s.u32(1..=28))
                .expect("month 1..=12 and day 1..=28 always exist");
            let name = format!(
                "{}{}{}",
                NAME_HEADS[s.usize(..NAME_HEADS.len())],
                NAME_MIDS[s.usize(..NAME_MIDS.len())],
                NAME_TAILS[s.usize(..NAME_TAILS.len())]
            );
            let concept_count = s.usize(1..=6);
            stocks.push(Stock {
                code: code_str,
                exchange,
                name,
                industry: s.usize(..INDUSTRIES.len()),
                region: s.usize(..REGIONS.len()),
                concepts: (0..concept_count).map(|_| s.usize(..concepts)).collect(),
                styles: (0..s.usize(1..=3))
                    .map(|_| s.usize(..STYLES.len()))
                    .collect(),
                listed,
                seed,
                base_price: 3.0 + s.f64().powi(3) * 120.0,
                shares_wan: 5_000.0 + s.f64().powi(2) * 2_000_000.0,
            });
            code = next_code(code, 1 + r.u32(0..3), FAMOUS.iter().map(|f| f.0));
        }
    }
    // The famous few keep their real names, industries and early listing dates.
    for &(code, name, industry) in FAMOUS {
        if let Some(stock) = stocks.iter_mut().find(|s| s.code == code) {
            stock.name = name.to_owned();
            stock.industry = INDUSTRIES.iter().position(|i| *i == industry).unwrap_or(0);
        }
    }
    if let Some(pingan) = stocks.iter_mut().find(|s| s.code == "000001") {
        pingan.listed = NaiveDate::from_ymd_opt(1991, 4, 3).expect("a real date");
    }
    if let Some(moutai) = stocks.iter_mut().find(|s| s.code == "600519") {
        moutai.listed = NaiveDate::from_ymd_opt(2001, 8, 27).expect("a real date");
        moutai.base_price = 35.0;
    }

    stocks
}

/// The ETFs, range by range, drawing code gaps from `r`.
fn etfs(r: &mut fastrand::Rng) -> Vec<Etf> {
    let mut etfs = Vec::with_capacity(1_000);
    let etf_ranges: &[(u32, usize, Exchange)] = &[
        (510_010, 240, Exchange::Sh),
        (512_500, 300, Exchange::Sh),
        (513_000, 90, Exchange::Sh),
        (515_000, 110, Exchange::Sh),
        (560_000, 60, Exchange::Sh),
        (588_000, 40, Exchange::Sh),
        (159_500, 300, Exchange::Sz),
    ];
    for &(first, count, exchange) in etf_ranges {
        let mut code = first;
        for _ in 0..count {
            let code_str = format!("{code:06}");
            let seed = seed_of(&code_str) ^ 0xE7F;
            let mut s = rng(seed);
            let index = s.usize(..TRACKED_INDICES.len());
            let company = FUND_COMPANIES[s.usize(..FUND_COMPANIES.len())];
            etfs.push(Etf {
                name: format!("{}ETF{}", TRACKED_INDICES[index].0, company),
                code: code_str,
                exchange,
                index,
                company,
                listed: NaiveDate::from_ymd_opt(s.i32(2005..=2025), s.u32(1..=12), s.u32(1..=28))
                    .expect("month 1..=12 and day 1..=28 always exist"),
                seed,
                base_price: 0.5 + s.f64() * 4.0,
            });
            code = next_code(code, 1 + r.u32(0..2), FAMOUS_ETFS.iter().copied());
        }
    }
    if let Some(hs300) = etfs.iter_mut().find(|e| e.code == "510300") {
        hs300.name = "沪深300ETF华泰柏瑞".into();
        hs300.index = 0;
    }
    if let Some(chinext) = etfs.iter_mut().find(|e| e.code == "159915") {
        chinext.name = "创业板ETF易方达".into();
        chinext.index = 3;
        chinext.company = "易方达";
    }

    etfs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universe_has_realistic_counts() {
        let u = universe();
        assert!(
            (5_300..=5_500).contains(&u.stocks.len()),
            "{}",
            u.stocks.len()
        );
        assert!((1_000..=1_300).contains(&u.etfs.len()), "{}", u.etfs.len());
        assert_eq!(u.hk.len(), 2_800);
        for (code, name) in hk::FAMOUS {
            assert_eq!(&u.hk(code).unwrap().name, name);
        }
        assert!(u.hk.iter().filter(|s| s.is_gem()).count() >= 300);
        assert!(u.hk.iter().all(|s| s.code.len() == 5));
        assert_eq!(u.stock("600519.SH").unwrap().name, "贵州茅台");
        assert_eq!(u.stock("000001").unwrap().listed.to_string(), "1991-04-03");
        assert!(u.etf("510300").is_some());
        for code in FAMOUS_ETFS {
            assert!(u.etf(code).is_some(), "{code}");
        }
        for (code, name, _) in FAMOUS {
            assert_eq!(&u.stock(code).unwrap().name, name);
        }
        assert!(u.stocks.iter().any(|s| s.exchange == Exchange::Bj));
        assert_eq!(province(0), "北京市");
        assert_eq!(province(7), "黑龙江省");
        assert_eq!(industry_code(0), "D017001001");
        assert!(
            u.stocks
                .iter()
                .any(|s| s.listed.to_string().starts_with("1990"))
        );
    }

    #[test]
    fn universe_is_deterministic() {
        let a = Universe::build();
        let b = Universe::build();
        assert_eq!(a.stocks.len(), b.stocks.len());
        assert_eq!(a.stocks[1234].name, b.stocks[1234].name);
        assert_eq!(a.etfs[99].code, b.etfs[99].code);
    }
}
