//! Scheduled prewarm with tokio-cron-scheduler, in China time: the built-in jobs of
//! docs/DOMAIN.md §8.2 (macro releases, classification and ETF lists before the open,
//! indices during sessions) and the operator's `[[scheduler.jobs]]`. Every job goes
//! through the proxy's own fill path and upstream budget, at background priority.
//! [`Jobs`] keeps what the status page shows of them: each job's plan, last run and
//! next firing.

use std::fmt;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use chrono_tz::Asia::Shanghai;
use tokio_cron_scheduler::{Job, JobScheduler};

use crate::cache::readthrough::Prewarmed;
use crate::state::AppState;
use mdproxy_api::params::Valid;
use mdproxy_api::parse_target;
use mdproxy_config::{Config, JobConfig, Problem};

/// When a job may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Whatever the market does (news, macro, overseas data).
    Always,
    /// On trading days only (data that is prepared for the session).
    TradingDays,
    /// Only while the market is in session (data that stands still otherwise).
    InSession,
}

impl When {
    /// Stable label for the status page.
    pub fn as_str(self) -> &'static str {
        match self {
            When::Always => "always",
            When::TradingDays => "trading_days",
            When::InSession => "in_session",
        }
    }
}

/// A job: a cron expression (with seconds, China time) and its targets.
#[derive(Clone, Debug)]
pub struct Plan {
    pub name: String,
    pub cron: String,
    pub when: When,
    pub targets: Vec<Valid>,
    /// Refetch even when the cached answer is still fresh (a macro release may have
    /// changed data that the cache considers fresh for hours).
    pub force: bool,
    /// Fetch a target only if a client asked for its endpoint within
    /// `scheduler.demand_window_secs` (docs/DOMAIN.md §8.2: the in-session loops are
    /// demand-driven, so an idle proxy does not poll the upstream every few seconds).
    pub on_demand: bool,
}

/// Checks a cron expression the way the scheduler will read it.
///
/// # Errors
/// A message when it does not parse.
pub fn check_cron(expr: &str) -> Result<(), String> {
    Job::new_async_tz(expr, Shanghai, |_, _| Box::pin(async {}))
        .map(drop)
        .map_err(|_| cron_fault(expr))
}

/// The fields of the scheduler's cron expressions: name, and the range of a value.
const CRON_FIELDS: [(&str, u32, u32); 7] = [
    ("seconds", 0, 59),
    ("minutes", 0, 59),
    ("hours", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
    ("year", 1970, 2099),
];

/// Names a field may hold instead of numbers: months and days of the week.
const CRON_NAMES: [&[&str]; 2] = [
    &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
];

/// What is wrong with a cron expression the scheduler refused: the field at fault
/// and its range when one is found, else the form it reads.
fn cron_fault(expr: &str) -> String {
    const FORM: &str =
        "seconds minutes hours day-of-month month day-of-week, e.g. \"0 45 8 * * Mon-Fri\"";
    let fields: Vec<&str> = expr.split_whitespace().collect();
    match fields.len() {
        6 | 7 => {}
        5 => {
            return format!(
                "5 fields: the scheduler's cron starts with a seconds field ({FORM}), so perhaps \"0 {expr}\""
            );
        }
        n => return format!("{n} fields where the scheduler reads 6 ({FORM})"),
    }
    for (field, (name, lo, hi)) in fields.iter().zip(CRON_FIELDS) {
        let names: &[&str] = match name {
            "month" => CRON_NAMES[0],
            "day-of-week" => CRON_NAMES[1],
            _ => &[],
        };
        for part in field.split(',') {
            // A step (`*/15`, `0/5`) is a count, not a value of the field.
            let values = part.split('/').next().unwrap_or_default();
            for value in values
                .split('-')
                .filter(|v| !matches!(*v, "*" | "?" | "" | "L"))
            {
                let value = value.split('#').next().unwrap_or_default();
                let value = value.strip_suffix(['L', 'W']).unwrap_or(value);
                if let Ok(n) = value.parse::<u32>() {
                    if !(lo..=hi).contains(&n) {
                        return format!("the {name} field holds {n}, outside {lo}-{hi} ({FORM})");
                    }
                } else if !names.iter().any(|known| known.eq_ignore_ascii_case(value)) {
                    return format!(
                        "the {name} field holds {value:?}, which is not a {name} value ({FORM})"
                    );
                }
            }
        }
    }
    format!("not a cron expression the scheduler reads ({FORM})")
}

/// Every problem of the operator's jobs (cron expressions, targets), each with its
/// key: the scheduler owns these checks, the config loader runs and reports them (a
/// [`mdproxy_config::Check`]).
pub fn check(config: &Config, _env: &dyn mdproxy_config::Env) -> Vec<Problem> {
    let mut problems = Vec::new();
    // A job's name is its claim in a fleet (one run per name and second): two
    // jobs of one name, or one named as a built-in job, would run one of them.
    let builtin: Vec<String> = builtin().into_iter().map(|p| p.name).collect();
    for (i, job) in config.scheduler.jobs.iter().enumerate() {
        let key = format!("scheduler.jobs[{i}].name");
        if job.name.trim().is_empty() {
            problems.push(Problem::new(key, "must not be empty"));
        } else if builtin.contains(&job.name) {
            problems.push(Problem::new(
                key,
                format!("{:?} is a built-in job's name: choose another", job.name),
            ));
        } else if let Some(first) = config.scheduler.jobs[..i]
            .iter()
            .position(|other| other.name == job.name)
        {
            problems.push(Problem::new(
                key,
                format!(
                    "{:?} is scheduler.jobs[{first}]'s name too: each job needs its own",
                    job.name
                ),
            ));
        }
        if let Err(e) = check_cron(&job.cron) {
            problems.push(Problem::new(format!("scheduler.jobs[{i}].cron"), e));
        }
        for (j, target) in job.targets.iter().enumerate() {
            if let Err(e) = parse_target(target) {
                problems.push(Problem::new(
                    format!("scheduler.jobs[{i}].targets[{j}]"),
                    format!("{target:?}: {e}"),
                ));
            }
        }
    }
    problems
}

fn targets(list: &[&str]) -> Vec<Valid> {
    list.iter()
        .map(|t| parse_target(t).expect("built-in targets are valid"))
        .collect()
}

fn macro_targets(slugs: &[&str]) -> Vec<Valid> {
    let list: Vec<String> = slugs
        .iter()
        .flat_map(|s| [format!("/macro/{s}"), format!("/macro/{s}/series")])
        .collect();
    targets(&list.iter().map(String::as_str).collect::<Vec<_>>())
}

fn plan(name: &str, cron: &str, when: When, force: bool, targets: Vec<Valid>) -> Plan {
    Plan {
        name: name.to_owned(),
        cron: cron.to_owned(),
        when,
        targets,
        force,
        on_demand: false,
    }
}

/// A plan that runs only for endpoints clients are using.
fn on_demand(plan: Plan) -> Plan {
    Plan {
        on_demand: true,
        ..plan
    }
}

/// The built-in jobs (docs/DOMAIN.md §8.2), China time.
pub fn builtin() -> Vec<Plan> {
    let all_macro: Vec<&str> = mdproxy_api::catalog::MACRO_INDICATORS
        .iter()
        .map(|(s, _)| *s)
        .collect();
    vec![
        plan(
            "macro-daily",
            "0 0 8 * * *",
            When::Always,
            false,
            macro_targets(&all_macro),
        ),
        plan(
            "macro-pmi",
            "0 31 9 28-31,1 * *",
            When::Always,
            true,
            macro_targets(&["pmi"]),
        ),
        plan(
            "macro-cpi-ppi",
            "0 31 9 8-14 * *",
            When::Always,
            true,
            macro_targets(&["cpi", "ppi"]),
        ),
        plan(
            "macro-lpr",
            "0 20,35 9 20-23 * *",
            When::Always,
            true,
            macro_targets(&["lpr"]),
        ),
        plan(
            "macro-nbs-activity",
            "0 1 10 14-20 * *",
            When::Always,
            true,
            macro_targets(&["fixed-asset-investment", "total-retail", "gdp"]),
        ),
        plan(
            "macro-customs",
            "0 5 11 7-15 * *",
            When::Always,
            true,
            macro_targets(&["customs-trade"]),
        ),
        plan(
            "macro-reserves",
            "0 5 16 6-9 * *",
            When::Always,
            true,
            macro_targets(&["gold-currency"]),
        ),
        plan(
            "macro-money",
            "0 0 17,20 10-16 * *",
            When::Always,
            true,
            macro_targets(&["currency-supply", "new-loans"]),
        ),
        plan(
            "lists-before-open",
            "0 45 8 * * Mon-Fri",
            When::TradingDays,
            true,
            targets(&[
                "/stock/industry/list",
                "/stock/area/list",
                "/stock/concept/list",
                "/stock/style/list",
                "/fund/all-etf-list",
            ]),
        ),
        on_demand(plan(
            "indices-in-session",
            "*/3 * 9-11,13-14 * * Mon-Fri",
            When::InSession,
            true,
            targets(&["/market/indices"]),
        )),
        on_demand(plan(
            "global-indices",
            "*/30 * * * * *",
            When::Always,
            false,
            targets(&["/market/global-index"]),
        )),
    ]
}

/// The operator's jobs.
///
/// # Panics
/// On a config that did not pass `validate()`.
pub fn configured(jobs: &[JobConfig]) -> Vec<Plan> {
    jobs.iter()
        .map(|j| Plan {
            name: j.name.clone(),
            cron: j.cron.clone(),
            when: if j.session_only {
                When::InSession
            } else {
                When::Always
            },
            targets: j
                .targets
                .iter()
                .map(|t| parse_target(t).expect("validated targets"))
                .collect(),
            force: true,
            on_demand: false,
        })
        .collect()
}

/// What became of one run of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ran {
    /// Not run: the market is closed for this job's `When`.
    MarketClosed,
    /// Not run here: another node of the cluster claimed this firing.
    OtherNode,
    /// Every target considered: `asked` of `of` were due (an on-demand job skips
    /// endpoints no client asked for lately); of those `filled` were fetched from
    /// the upstream, `restored` were taken from the disk tier or the fleet's shared
    /// store without an upstream request, `fresh` were already fresh in memory and
    /// `failed` got no usable answer (the first failure, target and error, in
    /// `first_error`).
    Done {
        of: usize,
        asked: usize,
        filled: usize,
        restored: usize,
        fresh: usize,
        failed: usize,
        first_error: Option<String>,
    },
}

impl Ran {
    /// Whether the run went as planned (skipping is fine, a failed target is not).
    pub fn is_ok(&self) -> bool {
        !matches!(self, Ran::Done { failed, .. } if *failed > 0)
    }

    /// Whether nothing was due: the market was closed, another node ran it, or no
    /// client asked for an on-demand job's endpoints lately.
    pub fn is_skipped(&self) -> bool {
        matches!(
            self,
            Ran::MarketClosed | Ran::OtherNode | Ran::Done { asked: 0, .. }
        )
    }
}

impl fmt::Display for Ran {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ran::MarketClosed => f.write_str("skipped: market closed"),
            Ran::OtherNode => f.write_str("skipped: another node ran it"),
            Ran::Done { asked: 0, .. } => f.write_str("skipped: no client asked lately"),
            Ran::Done {
                of,
                asked,
                filled,
                restored,
                fresh,
                failed,
                first_error,
            } => {
                write!(f, "filled {filled} of {asked}")?;
                if asked < of {
                    write!(f, " due ({of} planned)")?;
                }
                if *restored > 0 {
                    write!(f, ", {restored} from disk or the fleet")?;
                }
                if *fresh > 0 {
                    write!(f, ", {fresh} already fresh")?;
                }
                if *failed > 0 {
                    write!(f, ", {failed} failed")?;
                    if let Some(e) = first_error {
                        write!(f, " ({e})")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Runs one plan now: skips it when the market says so, then fills every target.
pub async fn run(state: &AppState, plan: &Plan) -> Ran {
    let snap = state.snapshot();
    let calendar = snap.policy.calendar();
    let now = state.clock().now();
    let skip = match plan.when {
        When::Always => false,
        When::TradingDays => !calendar.is_trading_day(now.with_timezone(&Shanghai).date_naive()),
        When::InSession => !calendar.is_open(now),
    };
    if skip {
        tracing::debug!(job = %plan.name, "skipped: market closed");
        return Ran::MarketClosed;
    }
    // In a cluster one node runs each firing (the first to claim its second); with
    // Redis away every node runs it.
    if state
        .fleet()
        .jobs()
        .claim(&plan.name, now.timestamp())
        .await
        == Ok(false)
    {
        tracing::debug!(job = %plan.name, "skipped: another node runs it");
        return Ran::OtherNode;
    }
    let window = std::time::Duration::from_secs(snap.config.scheduler.demand_window_secs);
    let (mut asked, mut filled, mut restored, mut fresh, mut failed) = (0, 0, 0, 0, 0);
    let mut first_error = None;
    for valid in &plan.targets {
        if plan.on_demand
            && !state
                .cache()
                .demand()
                .asked_within(valid.endpoint.id, window)
        {
            continue;
        }
        asked += 1;
        match state.cache().prewarm(&snap.policy, valid, plan.force).await {
            Ok(Prewarmed::Filled) => filled += 1,
            Ok(Prewarmed::Disk | Prewarmed::Shared) => restored += 1,
            Ok(Prewarmed::Fresh) => fresh += 1,
            Err(e) => {
                tracing::debug!(job = %plan.name, key = %valid.target, error = e.as_str(), "prewarm failed");
                failed += 1;
                first_error.get_or_insert_with(|| format!("{}: {e}", valid.target));
            }
        }
    }
    // One summary line per run, whatever the result: `warn` when something failed.
    let of = plan.targets.len();
    if let Some(error) = &first_error {
        tracing::warn!(job = %plan.name, filled, restored, fresh, failed, of, first_error = %error, "prewarm");
    } else if filled + restored + fresh > 0 {
        tracing::info!(job = %plan.name, filled, restored, fresh, of, "prewarm");
    }
    Ran::Done {
        of,
        asked,
        filled,
        restored,
        fresh,
        failed,
        first_error,
    }
}

/// Runs every plan once at start-up, fetching only what is not already fresh, and
/// records each run as the job's (the status page counts it); one log line for the
/// whole, saying how much came from the upstream and how much from the disk tier or
/// the fleet.
pub fn prewarm_on_start(state: &AppState, plans: &[(usize, Arc<Plan>)], jobs: &Jobs) {
    let (task_state, stop, jobs, plans) = (
        state.clone(),
        state.stop().clone(),
        jobs.clone(),
        plans.to_vec(),
    );
    state.tracker().spawn(async move {
        let (mut filled, mut restored, mut fresh, mut failed) = (0, 0, 0, 0);
        let mut first_error = None;
        let count = plans.len();
        for (index, plan) in plans {
            let unforced = Plan {
                force: false,
                ..(*plan).clone()
            };
            let ran = tokio::select! {
                ran = run(&task_state, &unforced) => ran,
                () = stop.cancelled() => return,
            };
            if let Ran::Done {
                filled: f,
                restored: d,
                fresh: r,
                failed: x,
                first_error: e,
                ..
            } = &ran
            {
                (filled, restored, fresh, failed) = (filled + f, restored + d, fresh + r, failed + x);
                first_error = first_error.or_else(|| e.clone());
            }
            jobs.record(index, Utc::now(), ran);
        }
        // One line for the whole start-up prewarm, whatever became of it.
        let jobs = count;
        match first_error {
            Some(error) => tracing::warn!(jobs, filled, restored, fresh, failed, first_error = %error, "start-up prewarm done, with failures"),
            None => tracing::info!(jobs, filled, restored, fresh, "start-up prewarm done"),
        }
    });
}

/// The parser the scheduler reads cron expressions with (seconds field required,
/// day of month and day of week both apply), for computing next firings.
fn schedule(expr: &str) -> Option<croner::Cron> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(expr)
        .ok()
}

/// One job as the status page shows it.
#[derive(Clone, Debug)]
pub struct JobView {
    pub plan: Arc<Plan>,
    /// When it last ran and what became of it.
    pub last_run: Option<(DateTime<Utc>, Ran)>,
    /// Runs since start.
    pub runs: u64,
    /// When the cron fires next (the run may still skip, see [`When`]).
    pub next_run: Option<DateTime<Utc>>,
}

struct JobEntry {
    plan: Arc<Plan>,
    schedule: Option<croner::Cron>,
    last_run: Option<(DateTime<Utc>, Ran)>,
    runs: u64,
}

/// The jobs the scheduler runs and how each last went: the scheduler records, the
/// status page reads (a lock taken once per run and per status request, never on
/// the request path). Cheap to clone; empty while the scheduler is off.
#[derive(Clone, Default)]
pub struct Jobs {
    inner: Arc<Mutex<Vec<JobEntry>>>,
}

impl Jobs {
    /// Registers each plan (the status page lists them with their runs), returning
    /// each with its place.
    pub fn register_all(&self, plans: Vec<Plan>) -> Vec<(usize, Arc<Plan>)> {
        plans
            .into_iter()
            .map(|plan| {
                let plan = Arc::new(plan);
                (self.register(Arc::clone(&plan)), plan)
            })
            .collect()
    }

    fn register(&self, plan: Arc<Plan>) -> usize {
        let mut jobs = self.inner.lock().expect("jobs lock is never poisoned");
        jobs.push(JobEntry {
            schedule: schedule(&plan.cron),
            plan,
            last_run: None,
            runs: 0,
        });
        jobs.len() - 1
    }

    /// Records a run of the job at `index` (a firing, or the start-up prewarm's).
    pub fn record(&self, index: usize, at: DateTime<Utc>, ran: Ran) {
        let mut jobs = self.inner.lock().expect("jobs lock is never poisoned");
        if let Some(job) = jobs.get_mut(index) {
            job.last_run = Some((at, ran));
            job.runs += 1;
        }
    }

    /// Every registered job with its last run and its next firing after `now`.
    pub fn view(&self, now: DateTime<Utc>) -> Vec<JobView> {
        let jobs = self.inner.lock().expect("jobs lock is never poisoned");
        let local = now.with_timezone(&Shanghai);
        jobs.iter()
            .map(|j| JobView {
                plan: Arc::clone(&j.plan),
                last_run: j.last_run.clone(),
                runs: j.runs,
                next_run: j
                    .schedule
                    .as_ref()
                    .and_then(|s| s.find_next_occurrence(&local, false).ok())
                    .map(|t| t.with_timezone(&Utc)),
            })
            .collect()
    }
}

/// Why the scheduler did not start.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// tokio-cron-scheduler refused to start or to take a job.
    #[error("scheduler: {0}")]
    Start(#[source] tokio_cron_scheduler::JobSchedulerError),
    /// A cron expression the loader let through did not parse.
    #[error("scheduler: invalid cron {0:?}")]
    Cron(String),
}

/// The running scheduler.
pub struct Scheduler {
    inner: JobScheduler,
}

impl Scheduler {
    /// Starts ticking the plans registered in `jobs` (which records each run).
    ///
    /// # Errors
    /// When the scheduler cannot start or a cron expression is invalid.
    pub async fn start(
        state: AppState,
        plans: Vec<(usize, Arc<Plan>)>,
        jobs: &Jobs,
    ) -> Result<Scheduler, SchedulerError> {
        let inner = JobScheduler::new().await.map_err(SchedulerError::Start)?;
        for (index, plan) in plans {
            let (state, jobs) = (state.clone(), jobs.clone());
            let cron = plan.cron.clone();
            let job = Job::new_async_tz(cron.as_str(), Shanghai, move |_, _| {
                let (state, plan, jobs) = (state.clone(), Arc::clone(&plan), jobs.clone());
                Box::pin(async move {
                    let ran = run(&state, &plan).await;
                    jobs.record(index, Utc::now(), ran);
                })
            })
            .map_err(|_| SchedulerError::Cron(cron.clone()))?;
            inner.add(job).await.map_err(SchedulerError::Start)?;
        }
        inner.start().await.map_err(SchedulerError::Start)?;
        Ok(Scheduler { inner })
    }

    /// Stops ticking.
    pub async fn shutdown(mut self) {
        if let Err(e) = self.inner.shutdown().await {
            tracing::warn!(error = %e, "scheduler did not shut down cleanly");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_jobs_parse_and_cover_the_domain_set() {
        let plans = builtin();
        for p in &plans {
            check_cron(&p.cron).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
        let all: Vec<&str> = plans
            .iter()
            .flat_map(|p| p.targets.iter().map(|t| t.endpoint.path.as_str()))
            .collect();
        let macro_count = all
            .iter()
            .filter(|p| p.starts_with("/macro/"))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(macro_count, 22, "the 11 macro series, table and chart");
        for list in [
            "/stock/industry/list",
            "/stock/area/list",
            "/stock/concept/list",
            "/stock/style/list",
            "/fund/all-etf-list",
            "/market/indices",
            "/market/global-index",
        ] {
            assert!(all.contains(&list), "{list}");
        }
    }

    #[test]
    fn jobs_are_checked_by_key() {
        assert!(check_cron("0 45 8 * * Mon-Fri").is_ok());
        assert!(check_cron("every morning").is_err());
    }

    /// A refused cron expression says which field is wrong and its range (a newcomer
    /// was told an hour of 25 was "not a cron expression with a seconds field").
    #[test]
    fn a_bad_cron_names_its_field_and_range() {
        let fault = |expr| check_cron(expr).unwrap_err();
        assert!(fault("0 0 25 * * *").starts_with("the hours field holds 25, outside 0-23"));
        assert!(fault("0 61 8 * * *").starts_with("the minutes field holds 61, outside 0-59"));
        assert!(fault("0 0 8 * 13 *").starts_with("the month field holds 13, outside 1-12"));
        assert!(fault("0 0 8 * * Mox").starts_with("the day-of-week field holds \"Mox\""));
        assert!(fault("45 8 * * Mon-Fri").starts_with("5 fields"));
        assert!(fault("45 8 * * Mon-Fri").contains("\"0 45 8 * * Mon-Fri\""));
        assert!(fault("every morning").starts_with("2 fields"));
        let mut config = Config::default();
        config.scheduler.jobs = vec![JobConfig {
            name: "j".into(),
            cron: "every morning".into(),
            targets: vec!["/stock/kline?code=600519".into(), "/nope".into()],
            session_only: false,
        }];
        let p = check(&config, &|_: &str| None);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].key.as_deref(), Some("scheduler.jobs[0].cron"));
        assert_eq!(p[1].key.as_deref(), Some("scheduler.jobs[0].targets[1]"));
    }

    /// Defect: two jobs of one name (or one named as a built-in job) claimed the
    /// same key in a fleet each second they both fired, so one of them never ran,
    /// said only at debug level. Each job needs a name of its own.
    #[test]
    fn a_job_needs_a_name_of_its_own() {
        let job = |name: &str| JobConfig {
            name: name.into(),
            cron: "0 45 15 * * Mon-Fri".into(),
            targets: vec!["/stock/kline?code=600519".into()],
            session_only: false,
        };
        let mut config = Config::default();
        config.scheduler.jobs = vec![job("mine"), job("macro-daily"), job("mine"), job(" ")];
        let p = check(&config, &|_: &str| None);
        let said: Vec<_> = p
            .iter()
            .map(|p| (p.key.clone().unwrap_or_default(), p.message.clone()))
            .collect();
        assert_eq!(p.len(), 3, "{said:?}");
        assert_eq!(said[0].0, "scheduler.jobs[1].name");
        assert!(said[0].1.contains("built-in"), "{said:?}");
        assert_eq!(said[1].0, "scheduler.jobs[2].name");
        assert!(
            said[1].1.contains("scheduler.jobs[0]'s name too"),
            "{said:?}"
        );
        assert_eq!(said[2].0, "scheduler.jobs[3].name");
        config.scheduler.jobs = vec![job("mine"), job("yours")];
        assert!(check(&config, &|_: &str| None).is_empty());
    }
}
