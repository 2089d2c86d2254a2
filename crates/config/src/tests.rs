//! The loader end to end: what a file and the environment make, and the report of
//! everything wrong with them.

use std::collections::BTreeMap;

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

/// The least a file must say: where the upstream is, its key and who may call.
const REQUIRED: &str = "[upstream]\nbase_url = \"https://api.example.com/api/v1\"\ntoken = \"upstream-key\"\n[auth]\ntokens = [\"t\"]\n";

fn load_text(text: &str, env: &dyn Env) -> Result<Config, Problems> {
    from_text(text, "f.toml", env, &[])
}

/// Every problem of `text` (with `env`), as (where, `key: what`).
fn problems(text: &str, env: &dyn Env) -> Vec<(At, String)> {
    match load_text(text, env) {
        Err(p) => {
            assert_eq!(p.origin, "f.toml");
            p.list
                .into_iter()
                .map(|p| {
                    let text = shown(&p);
                    (p.at, text)
                })
                .collect()
        }
        Ok(_) => panic!("expected problems in {text:?}"),
    }
}

fn shown(p: &Problem) -> String {
    match &p.key {
        Some(key) => format!("{key}: {}", p.message),
        None => p.message.clone(),
    }
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn defaults_fail_closed_until_the_required_keys_are_given() {
    let err = Config::default().validate().unwrap_err().to_string();
    assert!(err.contains("upstream.base_url: missing"), "{err}");
    assert!(err.contains("at least one client token"), "{err}");
    let c = load_text(REQUIRED, &no_env).unwrap();
    assert_eq!(c.auth.tokens, vec![Secret::new("t")]);
}

/// Defect: with the required keys in the environment (the container pattern), an
/// empty file loaded, and a reload applied it with every other key back at its
/// default. A file that sets nothing is refused whatever the environment holds.
#[test]
fn an_empty_file_is_refused_whatever_the_environment_holds() {
    let env = vars(&[
        (
            "MDPROXY_UPSTREAM_BASE_URL",
            "https://api.example.com/api/v1",
        ),
        ("MDPROXY_UPSTREAM_TOKEN", "upstream-key"),
        ("MDPROXY_AUTH_TOKENS", "t1,t2"),
    ]);
    for empty in [
        "",
        "\n# nothing yet\n",
        "[server]\n",
        "[limits]\n[server]\n",
    ] {
        let found = problems(empty, &env);
        assert_eq!(
            found,
            [(
                At::File,
                "the file sets no key; an empty or cut-short file is never applied, whatever the environment holds".to_owned()
            )],
            "{empty:?}"
        );
    }
    let c = load_text("[limits]\nupstream_rps = 7\n", &env).unwrap();
    assert_eq!(c.limits.upstream_rps, 7);
    assert_eq!(c.auth.tokens.len(), 2);
}

#[test]
fn plain_http_goes_only_to_loopback_unless_allowed() {
    let with = |url: &str, allow: bool| {
        let mut c = load_text(REQUIRED, &no_env).unwrap();
        c.upstream.base_url = url.to_owned();
        c.upstream.allow_plain_http = allow;
        c.validate()
    };
    assert!(with("http://127.0.0.1:9090/api/v1", false).is_ok());
    assert!(with("https://10.0.0.5/api/v1", false).is_ok());
    let err = with("http://10.0.0.5/api/v1", false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("allow_plain_http"), "{err}");
    assert!(with("http://10.0.0.5/api/v1", true).is_ok());
    assert!(with("ftp://x/api/v1", true).is_err());
}

/// Defect: a `base_url` without `/api/v1` was accepted though the error text said it
/// must end with it. The check and the text agree now, for fallbacks too.
#[test]
fn base_urls_must_end_with_the_api_root() {
    let text = format!(
        "{REQUIRED}[[upstream.fallback]]\nbase_url = \"https://mirror.example.com\"\ntoken = \"k2\"\n"
    )
    .replace("example.com/api/v1\"", "example.com/\"");
    let found = problems(&text, &no_env);
    assert_eq!(
        found,
        [
            (
                At::Line(2),
                "upstream.base_url: \"https://api.example.com/\" must end with /api/v1, the API's root (https://host/api/v1)".to_owned()
            ),
            (
                At::Line(7),
                "upstream.fallback[0].base_url: \"https://mirror.example.com\" must end with /api/v1, the API's root (https://host/api/v1)".to_owned()
            ),
        ]
    );
}

/// Security review: credentials in a base URL were printed in the banner, the
/// probe's log and the unauthenticated `/status`. They are refused (the key goes in
/// `upstream.token`), and the refusal does not show them either.
#[test]
fn credentials_in_a_base_url_are_refused_without_being_shown() {
    let text = format!(
        "{REQUIRED}[[upstream.fallback]]\nbase_url = \"https://backup:hunter2@mirror.example.com/api/v1\"\ntoken = \"k2\"\n"
    )
    .replace("https://api.", "https://me:pa55w0rd@api.");
    let err = load_text(&text, &no_env).unwrap_err();
    let shown = err.to_string();
    assert_eq!(err.list.len(), 2, "{shown}");
    assert!(shown.contains("f.toml:2: upstream.base_url: \"https://***@api.example.com/api/v1\" carries a user name or password"), "{shown}");
    assert!(shown.contains("f.toml:7: upstream.fallback[0].base_url: \"https://***@mirror.example.com/api/v1\" carries"), "{shown}");
    for secret in ["pa55w0rd", "hunter2", "me:", "backup:"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    let env = vars(&[(
        "MDPROXY_UPSTREAM_BASE_URL",
        "http://u:s3cret@127.0.0.1:1/api/v1",
    )]);
    let shown = load_text(REQUIRED, &env).unwrap_err().to_string();
    assert!(
        shown.starts_with(
            "MDPROXY_UPSTREAM_BASE_URL: upstream.base_url: \"http://***@127.0.0.1:1/api/v1\""
        ),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
}

/// Security review: `change-me` and an empty upstream token went through `serve`
/// and `check-config` silently. A loaded file is refused for them; the demo's own
/// configuration, built in code, still validates.
#[test]
fn placeholders_and_a_missing_upstream_key_refuse_a_served_file() {
    let text = "[upstream]\nbase_url = \"https://api.example.com/api/v1\"\n\
                [auth]\ntokens = [\"change-me\"]\n\
                [[auth.clients]]\nname = \"dash\"\ntoken = \"change-me-too\"\n\
                [admin]\ntoken = \"<admin-token>\"\n";
    let found = problems(text, &no_env);
    let placeholder = "a placeholder (such as \"change-me\"), not a secret: set a real one";
    assert_eq!(
        found,
        [
            (At::Line(1), "upstream.token: missing: the upstream's key (set MDPROXY_UPSTREAM_TOKEN rather than writing it in the file)".to_owned()),
            (At::Line(4), format!("auth.tokens[0]: {placeholder}")),
            (At::Line(7), format!("auth.clients[0].token: {placeholder}")),
            (At::Line(9), format!("admin.token: {placeholder}")),
        ]
    );
    let env = vars(&[("MDPROXY_UPSTREAM_TOKEN", "change-me")]);
    let found = problems(&REQUIRED.replace("upstream-key", "k"), &env);
    assert_eq!(
        found,
        [(
            At::Var("MDPROXY_UPSTREAM_TOKEN".into()),
            format!("upstream.token: {placeholder}")
        )]
    );
    let env = vars(&[("MDPROXY_AUTH_TOKENS", "a-real-one,replace-me")]);
    assert_eq!(
        problems(REQUIRED, &env),
        [(
            At::Var("MDPROXY_AUTH_TOKENS".into()),
            format!("auth.tokens[1]: {placeholder}")
        )]
    );
    let mut demo = load_text(REQUIRED, &no_env).unwrap();
    demo.auth.tokens = vec![Secret::new("demo-token")];
    demo.upstream.token = Secret::default();
    assert!(
        demo.validate().is_ok(),
        "the demo's own config is not a served file"
    );
}

#[test]
fn env_overrides_apply_by_type() {
    let env = |k: &str| match k {
        "MDPROXY_UPSTREAM_TIMEOUT_MS" => Some("1500".to_owned()),
        "MDPROXY_AUTH_TOKENS" => Some("a, b".to_owned()),
        "MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS" => Some("7".to_owned()),
        _ => None,
    };
    let text = REQUIRED.replace("[auth]\ntokens = [\"t\"]\n", "timeout_ms = 99\n");
    let c = load_text(&text, &env).unwrap();
    assert_eq!(c.upstream.timeout_ms, 1500);
    assert_eq!(c.auth.tokens, vec![Secret::new("a"), Secret::new("b")]);
    assert_eq!(
        c.freshness.classes[&FreshnessClass::Live].session_fresh_secs,
        7
    );
}

#[test]
fn errors_name_the_key() {
    let err = |text: &str| load_text(text, &no_env).unwrap_err().to_string();
    assert!(err("[server]\nlisten = \"nowhere\"\n").contains("server.listen"));
    assert!(err("[upstream]\nbogus = 1\n").contains("upstream.bogus: unknown key"));
    assert!(err("[freshness.endpoints.\"/nope\"]\nsession_fresh_secs = 1\n").contains("/nope"));
    assert!(
        err("[log]\nformat = \"jsn\"\n")
            .contains("log.format: \"jsn\" is not one of text, json (did you mean json?)")
    );
    assert!(
        err("[server]\ntoken = \"x\"\n")
            .contains("server.token: unknown key (did you mean admin.token or upstream.token?)")
    );
}

#[test]
fn partial_tables_keep_other_defaults() {
    let text = format!("{REQUIRED}[freshness.classes.live]\nsession_fresh_secs = 9\n");
    let c = load_text(&text, &no_env).unwrap();
    let live = c.freshness.classes[&FreshnessClass::Live];
    assert_eq!((live.session_fresh_secs, live.session_stale_secs), (9, 6));
    assert_eq!(c.freshness.classes.len(), FreshnessClass::ALL.len());
}

#[test]
fn endpoint_override_wins_over_class() {
    let text =
        format!("{REQUIRED}[freshness.endpoints.\"/market/indices\"]\nsession_fresh_secs = 1\n");
    let c = load_text(&text, &no_env).unwrap();
    let indices = c.ttl("/market/indices", FreshnessClass::Live);
    assert_eq!(indices.session_fresh_secs, 1);
    assert_eq!(
        indices.session_stale_secs, 6,
        "unset keys come from the class"
    );
    assert_eq!(
        c.ttl("/stock/list", FreshnessClass::Live)
            .session_fresh_secs,
        3
    );
    assert!(
        !c.ttl("/market/global-index", FreshnessClass::Live)
            .until_open
    );
}

/// Defect: a file with three mistakes took three runs of `check-config`, one
/// serde error each. One run reports them all, each with its key and line, and
/// the value checks of the sections without such mistakes.
#[test]
fn one_run_reports_every_problem_with_its_line() {
    let text = format!(
        "{REQUIRED}\
         [server]\n\
         listn = \"127.0.0.1:8080\"\n\
         max_connections = \"lots\"\n\
         [freshness.classes.live]\n\
         session_fresh_secs = \"3\"\n\
         [freshness.classes.lvie]\n\
         error_secs = 1\n\
         [limits]\n\
         background_percent = 101\n\
         client_rps = 5000000000\n\
         [hub]\n\
         batch_size = 0\n"
    );
    let found = problems(&text, &no_env);
    let line = At::Line;
    assert_eq!(
        found,
        [
            (line(7), "server.listn: unknown key (did you mean server.listen?)".to_owned()),
            (
                line(8),
                "server.max_connections: expected an integer, found a string \"lots\"".into()
            ),
            (
                line(10),
                "freshness.classes.live.session_fresh_secs: expected an integer, found a string \"3\"".into()
            ),
            (
                line(11),
                "freshness.classes.lvie: unknown key (did you mean freshness.classes.live?)".into()
            ),
            (
                line(15),
                "limits.client_rps: invalid value: integer `5000000000`, expected u32".into()
            ),
            (line(17), "hub.batch_size: must be at least 1".into()),
        ],
        "limits.background_percent is not judged while its section has a bad key"
    );
    // Fixed, the value checks of [limits] speak too.
    let text = text.replace("client_rps = 5000000000", "client_rps = 5");
    let found = problems(&text, &no_env);
    assert!(
        found.contains(&(
            line(14),
            "limits.background_percent: must be at most 100".into()
        )),
        "{found:?}"
    );
    assert_eq!(found.len(), 6, "{found:?}");
}

#[test]
fn lists_and_tables_of_the_operators_own_naming_are_checked() {
    let text = format!(
        "{REQUIRED}\
         [[auth.clients]]\n\
         name = \"dash\"\n\
         rps = \"10\"\n\
         [[scheduler.jobs]]\n\
         name = \"j\"\n\
         cron = \"0 0 9 * * Mon-Fri\"\n\
         target = [\"/market/indices\"]\n\
         [freshness.endpoints.\"/market/indices\"]\n\
         session_fresh = 1\n\
         [[auth.clients]]\n\
         name = \"ok\"\n\
         token = \"client-key\"\n\
         burst = -1\n"
    );
    let found = problems(&text, &no_env);
    assert_eq!(
        found,
        [
            (At::Line(6), "auth.clients[0].token: required key missing".to_owned()),
            (
                At::Line(8),
                "auth.clients[0].rps: expected an integer, found a string \"10\"".into()
            ),
            (At::Line(9), "scheduler.jobs[0].targets: required key missing".into()),
            (
                At::Line(12),
                "scheduler.jobs[0].target: unknown key (did you mean scheduler.jobs[0].targets?)"
                    .into()
            ),
            (
                At::Line(14),
                "freshness.endpoints.\"/market/indices\".session_fresh: unknown key (did you mean freshness.endpoints.\"/market/indices\".session_fresh_secs?)".into()
            ),
            (
                At::Line(18),
                "auth.clients[1].burst: invalid value: integer `-1`, expected u32".into()
            ),
        ],
        "the second client keeps its own number though the first was left out"
    );
}

#[test]
fn value_checks_point_to_the_line_or_the_variable() {
    let text = format!(
        "{REQUIRED}[server]\nlisten = \"nowhere\"\n[freshness.endpoints.\"/market/indics\"]\nerror_secs = 1\n"
    );
    let env = vars(&[("MDPROXY_HUB_BATCH_SIZE", "0")]);
    let found = problems(&text, &env);
    assert_eq!(
        found,
        [
            (
                At::Line(7),
                "server.listen: \"nowhere\" is not an address such as 127.0.0.1:8080".to_owned()
            ),
            (
                At::Line(8),
                "freshness.endpoints.\"/market/indics\": no such endpoint (did you mean /market/indices?)".into()
            ),
            (
                At::Var("MDPROXY_HUB_BATCH_SIZE".into()),
                "hub.batch_size: must be at least 1".into()
            ),
        ]
    );
    // A key the file lacks points to its table, or to the file.
    let found = problems(
        "[upstream]\ntimeout_ms = 5\ntoken = \"k\"\n[auth]\ntokens = [\"t\"]\n",
        &no_env,
    );
    assert_eq!(found[0].0, At::Line(1), "{found:?}");
    assert!(
        found[0].1.starts_with("upstream.base_url: missing"),
        "{found:?}"
    );
    let found = problems("[auth]\ntokens = [\"t\"]\n", &no_env);
    assert_eq!(found[0].0, At::File, "{found:?}");
}

/// The vendor's day is counted in a time zone that exists (from the file or
/// `MDPROXY_LIMITS_QUOTA_TIME_ZONE`), and the pause of a `Retry-After` the upstream
/// did not give is no longer than the longest one allowed.
#[test]
fn the_quota_time_zone_and_the_default_pause_are_checked() {
    let env = vars(&[("MDPROXY_LIMITS_QUOTA_TIME_ZONE", "UTC")]);
    let c = load_text(REQUIRED, &env).unwrap();
    assert_eq!(c.limits.quota_time_zone, "UTC");
    let text = format!(
        "{REQUIRED}[limits]\nquota_time_zone = \"China\"\nretry_after_default_secs = 60\nretry_after_max_secs = 30\n"
    );
    assert_eq!(
        problems(&text, &no_env),
        [
            (
                At::Line(7),
                "limits.quota_time_zone: \"China\" is not a time zone name such as Asia/Shanghai or UTC".to_owned()
            ),
            (
                At::Line(8),
                "limits.retry_after_default_secs: must be at most limits.retry_after_max_secs".into()
            ),
        ]
    );
    let env = vars(&[("MDPROXY_LIMITS_QUOTA_TIME_ZONE", "Asia/Shanghia")]);
    let found = problems(REQUIRED, &env);
    assert_eq!(
        found[0].0,
        At::Var("MDPROXY_LIMITS_QUOTA_TIME_ZONE".into()),
        "{found:?}"
    );
}

/// Defect: a misspelt `MDPROXY_*` variable was ignored, so the setting silently
/// did not apply. It is refused, with the names it was probably meant to be.
#[test]
fn unknown_variables_are_refused_with_a_suggestion() {
    let env = vars(&[
        ("MDPROXY_SERVR_LISTEN", "127.0.0.1:1"),
        ("MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS", "3"),
        ("MDPROXY_SCHEDULER_JOBS", "x"),
        ("MDPROXY_UPSTREAM_TIMEOUT_MS", "soon"),
        ("MDPROXY_UPSTREAM_CONNECT_TIMEOUT_MS", "100"),
        ("PATH", "/bin"),
    ]);
    let found = problems(REQUIRED, &env);
    let var = |v: &str| At::Var(v.into());
    assert_eq!(
        found,
        [
            (
                var("MDPROXY_FRESHNESS_CLASSES_LIVE_FRESH_SECS"),
                "unknown variable (did you mean MDPROXY_FRESHNESS_CLASSES_LIVE_CLOSED_FRESH_SECS or MDPROXY_FRESHNESS_CLASSES_LIVE_SESSION_FRESH_SECS?)".to_owned()
            ),
            (
                var("MDPROXY_SCHEDULER_JOBS"),
                "not a variable: scheduler.jobs can be set in the file only".into()
            ),
            (
                var("MDPROXY_SERVR_LISTEN"),
                "unknown variable (did you mean MDPROXY_SERVER_LISTEN?)".into()
            ),
            (
                var("MDPROXY_UPSTREAM_TIMEOUT_MS"),
                "upstream.timeout_ms: \"soon\" is not an integer".into()
            ),
        ]
    );
    // Known variables alone load; a bare lookup lists no names to check.
    let env = vars(&[("MDPROXY_UPSTREAM_CONNECT_TIMEOUT_MS", "100")]);
    let c = load_text(REQUIRED, &env).unwrap();
    assert_eq!(c.upstream.connect_timeout_ms, 100);
    assert!(load_text(REQUIRED, &|_: &str| None).is_ok());
}

#[test]
fn syntax_errors_are_reported_alone_with_their_lines() {
    let found = problems("[server\nlisten = 1\n", &vars(&[("MDPROXY_X", "1")]));
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, At::Line(1));
    assert!(found[0].1.starts_with("invalid TOML: "), "{found:?}");
    assert_eq!(found[1].0, At::Var("MDPROXY_X".into()));
}

#[test]
fn problems_never_show_a_secret() {
    let text = "[auth]\ntokens = \"s3cret-one\"\n[upstream]\nbase_url = \"https://x/api/v1\"\n[[auth.clients]]\nname = \"n\"\ntoken = 5\n[admin]\ntokens = \"s3cret-two\"\n[cluster]\nredis_url = 7\n";
    let shown = load_text(text, &no_env).unwrap_err().to_string();
    assert!(
        shown.contains("auth.tokens: expected an array, found a string\n"),
        "{shown}"
    );
    assert!(
        shown.contains("auth.clients[0].token: expected a string, found an integer\n"),
        "{shown}"
    );
    assert!(
        shown.contains("cluster.redis_url: expected a string, found an integer\n"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
    let env = vars(&[("MDPROXY_CLUSTER_REDIS_URL", "http://:s3cret@x")]);
    let shown = load_text(REQUIRED, &env).unwrap_err().to_string();
    assert!(!shown.contains("s3cret"), "{shown}");
}

/// A sentinel written as a URL with a password is refused without showing it; a
/// node's name with a space (which would cut the fleet's messages) is refused.
#[test]
fn sentinels_and_node_names_are_checked_without_showing_a_password() {
    let text = format!(
        "{REQUIRED}[cluster]\nsentinels = [\"redis://:s3cret@sentinel-1\"]\nsentinel_master = \"m\"\nnode_id = \"node one\"\n"
    );
    let shown = load_text(&text, &no_env).unwrap_err().to_string();
    assert!(
        shown.contains("cluster.sentinels: entry 1 is not host:port"),
        "{shown}"
    );
    assert!(shown.contains("cluster.node_id: has a space"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

/// The edge compares tokens as the bytes of a header value: one that a header
/// cannot carry is refused, and the refusal does not show it.
#[test]
fn tokens_a_header_cannot_carry_are_refused() {
    for token in ["s3cret one", "s3cret\\tone", "s3cret-ü"] {
        for table in [
            format!("[auth]\ntokens = [\"{token}\"]\n"),
            format!("[auth]\n[[auth.clients]]\nname = \"n\"\ntoken = \"{token}\"\n"),
        ] {
            let text = REQUIRED.replace("[auth]\ntokens = [\"t\"]\n", &table);
            let shown = load_text(&text, &no_env).unwrap_err().to_string();
            assert!(shown.contains("must be visible ASCII"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }
    let ok = REQUIRED.replace("\"t\"", "\"a-Z_0.9~!\"");
    assert!(load_text(&ok, &no_env).is_ok());
}

/// Defect: an upstream token a header cannot carry passed validation and was
/// refused by the upstream client afterwards (at start, or half-way through a
/// reload). The primary's and each fallback's are checked, and not shown.
#[test]
fn upstream_tokens_a_header_cannot_carry_are_refused() {
    for token in ["s3cret one", "s3cret\\none", "s3cret-ü"] {
        let primary = REQUIRED.replace("upstream-key", token);
        let fallback = format!(
            "{REQUIRED}[[upstream.fallback]]\nbase_url = \"https://mirror.example.com/api/v1\"\ntoken = \"{token}\"\n"
        );
        for (text, key) in [
            (primary, "upstream.token"),
            (fallback, "upstream.fallback[0].token"),
        ] {
            let shown = load_text(&text, &no_env).unwrap_err().to_string();
            assert!(
                shown.contains(&format!("{key}: must be visible ASCII")),
                "{shown}"
            );
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }
}

#[test]
fn the_checks_of_other_modules_join_the_report() {
    let cron: Check = |c, _| {
        vec![Problem::new(
            "scheduler.jobs[0].cron",
            format!("{:?} is not cron", c.scheduler.jobs[0].cron),
        )]
    };
    let text = format!("{REQUIRED}[[scheduler.jobs]]\nname = \"j\"\ncron = \"x\"\ntargets = []\n");
    let err = from_text(&text, "f.toml", &no_env, &[cron])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "f.toml:8: scheduler.jobs[0].cron: \"x\" is not cron\n1 problem"
    );
    // A section with a structural mistake is not judged further.
    let text = text.replace("targets = []", "targets = []\nbogus = 1");
    let err = from_text(&text, "f.toml", &no_env, &[cron])
        .unwrap_err()
        .to_string();
    assert!(!err.contains("is not cron"), "{err}");
}

/// `mcp.allowed_origins` takes origins with their scheme and port (what rmcp
/// matches), and `null`; anything else is refused by name.
#[test]
fn mcp_origins_need_their_scheme_and_port() {
    let env = BTreeMap::new();
    for good in ["https://app.example.com:443", "http://localhost:*", "null"] {
        let text = format!("{REQUIRED}[mcp]\nallowed_origins = [\"{good}\"]\n");
        assert!(from_text(&text, "f.toml", &env, &[]).is_ok(), "{good}");
    }
    for bad in [
        "app.example.com",
        "https://app.example.com",
        "https://a.example:443/x",
    ] {
        let text = format!("{REQUIRED}[mcp]\nallowed_origins = [\"{bad}\"]\n");
        let err = from_text(&text, "f.toml", &env, &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mcp.allowed_origins") && err.contains(bad),
            "{err}"
        );
    }
}

/// `mcp.tools` names tools that exist.
#[test]
fn mcp_tools_must_exist() {
    let env = BTreeMap::new();
    let text = format!("{REQUIRED}[mcp]\ntools = [\"get_stock_kline\", \"get_weather\"]\n");
    let err = from_text(&text, "f.toml", &env, &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mcp.tools: \"get_weather\" is no tool; the tools are search_stocks"),
        "{err}"
    );
    assert!(!err.contains("\"get_stock_kline\" is no tool"), "{err}");
}
