//! The status page: `/status` is an HTML page that headless Chromium renders with
//! every section filled in; `/status.json` keeps the machine-readable form, with the
//! sampled history and the scheduler's jobs.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use mdproxy_config::JobConfig;
use support::header;

/// A proxy with the admin listener and the scheduler on, running one job of ours
/// every second (so a run is on record within the test); the start-up prewarm is
/// off so that only this test's requests and that job reach the upstream.
async fn status_env() -> (support::Env, String) {
    let env = support::start_with(
        |_| {},
        |c| {
            c.admin.listen = "127.0.0.1:0".into();
            c.scheduler.enabled = true;
            c.scheduler.prewarm_on_start = false;
            c.scheduler.jobs = vec![JobConfig {
                name: "every-second".into(),
                cron: "* * * * * *".into(),
                targets: vec!["/market/indices".into()],
                session_only: false,
            }];
        },
        // Answers stay fresh on a Saturday, so the HIT counts below hold.
        Some(support::saturday()),
    )
    .await;
    let admin = format!("http://{}", env.proxy.admin_addr.unwrap());
    (env, admin)
}

/// Hits and misses on two endpoints: `/macro/cpi/series` 1 miss + 2 hits (66.7 %),
/// `/stock/detail/{code}` 1 miss + 1 hit (50.0 %).
async fn traffic(env: &support::Env) {
    for target in [
        "/macro/cpi/series",
        "/macro/cpi/series",
        "/macro/cpi/series",
        "/stock/detail/600519",
        "/stock/detail/600519",
    ] {
        assert_eq!(env.get(target).await.status(), 200, "{target}");
    }
}

async fn status_json(env: &support::Env, admin: &str) -> serde_json::Value {
    let r = env.fetch(&format!("{admin}/status.json")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "application/json");
    r.json().await.unwrap()
}

/// Waits (bounded) until the sampler has recorded this test's traffic and the
/// job has run once; returns the status then.
async fn settled(env: &support::Env, admin: &str) -> serde_json::Value {
    let every = Duration::from_secs(5);
    // Two sampling periods and the job's second, with room for a loaded machine.
    let mut status = serde_json::Value::Null;
    for _ in 0..120 {
        status = status_json(env, admin).await;
        let sampled = status["history"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["requests"].as_u64() > Some(0));
        let ran = status["scheduler"]["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["name"] == "every-second" && j["last_run"].is_object());
        if sampled && ran {
            return status;
        }
        tokio::time::sleep(every / 20).await;
    }
    panic!(
        "no history sample with requests or no run of the job within 30 s: history {}, scheduler {}",
        status["history"], status["scheduler"]
    );
}

/// `/status` is HTML; `/status.json` is JSON with the history and the scheduler.
#[tokio::test]
async fn status_is_html_and_status_json_has_history_and_scheduler() {
    let (env, admin) = status_env().await;
    traffic(&env).await;
    let page = env.fetch(&format!("{admin}/status")).await;
    assert_eq!(page.status(), 200);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&page, "cache-control"), "no-store");
    assert!(header(&page, "content-security-policy").contains("default-src 'none'"));
    let html = page.text().await.unwrap();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(html.contains(r#"<script type="application/json" id="status-data">{"#));
    assert!(!html.contains("{{STATUS_JSON}}"));

    let status = settled(&env, &admin).await;
    let history = status["history"].as_array().unwrap();
    let sample = history
        .iter()
        .find(|s| s["requests"].as_u64() > Some(0))
        .unwrap();
    assert!(sample["t"].as_i64().unwrap() > 1_700_000_000, "{sample}");
    assert!(sample["at"].as_str().unwrap().ends_with(" CST"), "{sample}");
    assert!(sample["rps"].as_f64().unwrap() > 0.0, "{sample}");
    let ratio = sample["hit_ratio"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&ratio), "{sample}");
    assert_eq!(status["history_every_secs"], 5);

    let scheduler = &status["scheduler"];
    assert_eq!(scheduler["running"], true);
    let jobs = scheduler["jobs"].as_array().unwrap();
    assert!(
        jobs.iter().any(|j| j["name"] == "macro-daily"),
        "the built-in jobs are listed too"
    );
    let job = jobs.iter().find(|j| j["name"] == "every-second").unwrap();
    assert_eq!(job["cron"], "* * * * * *");
    assert_eq!(job["when"], "always");
    assert_eq!(job["targets"], serde_json::json!(["/market/indices"]));
    assert!(job["runs"].as_u64().unwrap() >= 1);
    assert!(job["next_run"].as_str().unwrap().ends_with(" CST"), "{job}");
    let last = &job["last_run"];
    assert_eq!(last["ok"], true, "{job}");
    assert_eq!(last["result"], "filled 1 of 1", "{job}");

    let cpi = status["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == "/macro/cpi/series")
        .unwrap();
    assert_eq!(cpi["hit_ratio"], 0.667);
    assert!(cpi["rps"].as_f64().unwrap() > 0.0, "{cpi}");
}

/// Chromium from Debian's `chromium` package; `scripts/test` installs it.
fn chromium() -> PathBuf {
    support::program("chromium")
}

/// Loads `url` in headless Chromium and returns the DOM after the page's script ran.
async fn rendered_dom(url: &str) -> String {
    rendered_dom_at(url, "1280,900").await
}

/// Loads `url` in headless Chromium with a window of `size` (`width,height`) and
/// returns the DOM after the page's script ran.
async fn rendered_dom_at(url: &str, size: &str) -> String {
    let profile = std::env::temp_dir().join(format!(
        "mdproxy-status-chromium-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let run = tokio::process::Command::new(chromium())
        .args([
            "--headless=new",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--window-size={size}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", url])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("chromium dumps the DOM within 120 s")
        .expect("chromium starts");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        output.status.success(),
        "chromium failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The text of the element with `id` in a dumped DOM (from its start tag to the
/// next section), for checks that must look at one section.
fn section<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!(r#"<section id="{id}""#))
        .unwrap_or_else(|| panic!("no section {id} in {dom}"));
    let rest = &dom[start..];
    let end = rest.find("</section>").unwrap();
    &rest[..end]
}

/// Headless Chromium renders every section of `/status` with this proxy's data.
#[tokio::test]
#[ignore = "needs Chromium: scripts/test installs it and runs the ignored tests"]
async fn chromium_renders_every_section_with_data() {
    let (env, admin) = status_env().await;
    traffic(&env).await;
    let status = settled(&env, &admin).await;
    let dom = rendered_dom(&format!("{admin}/status")).await;

    for heading in [
        "Overview",
        "Market (China time)",
        "Upstream",
        "Traffic",
        "Endpoints",
        "Cache",
        "Quote hub",
        "Config reloads",
        "Scheduler",
    ] {
        assert!(dom.contains(&format!("<h2>{heading}</h2>")), "{heading}");
    }
    assert!(
        !dom.contains(r#"<p class="badge bad">cannot show"#),
        "a section failed to render: {dom}"
    );

    let overview = section(&dom, "overview");
    assert!(
        overview.contains(status["version"].as_str().unwrap()),
        "{overview}"
    );
    assert!(overview.contains("Uptime"), "{overview}");
    assert!(overview.contains(">ready<"), "{overview}");

    let market = section(&dom, "market");
    assert!(market.contains("closed"), "Saturday: {market}");
    assert!(market.contains("Next open"), "{market}");
    let next_open = status["market"]["next_open"].as_str().unwrap();
    assert!(market.contains(next_open), "{market}");

    let upstream = section(&dom, "upstream");
    assert!(
        upstream.contains(&format!("http://{}", env.sim.addr)),
        "{upstream}"
    );
    assert!(upstream.contains(">closed<"), "breaker: {upstream}");
    assert!(upstream.contains("token_refused"), "{upstream}");

    let endpoints = section(&dom, "endpoints");
    assert!(endpoints.contains("/macro/cpi/series"), "{endpoints}");
    assert!(endpoints.contains("/stock/detail/{code}"), "{endpoints}");
    assert!(endpoints.contains("66.7 %"), "cpi: 2 of 3 {endpoints}");
    assert!(endpoints.contains("50.0 %"), "detail: 1 of 2 {endpoints}");
    assert!(
        endpoints.contains(r#"aria-sort="descending""#),
        "sorted by a column: {endpoints}"
    );
    assert!(
        endpoints.contains("<button"),
        "sortable headers: {endpoints}"
    );

    let traffic = section(&dom, "traffic");
    for chart in ["chart-rps", "chart-hit-ratio"] {
        let at = traffic
            .find(&format!(r#"id="{chart}""#))
            .unwrap_or_else(|| panic!("no {chart}: {traffic}"));
        let figure = &traffic[at..];
        let figure = &figure[..figure.find("</figure>").unwrap()];
        assert!(figure.contains("<svg"), "{figure}");
        let points: usize = figure
            .split(r#"data-points=""#)
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no data-points: {figure}"));
        assert!(points >= 1, "{chart} has data: {figure}");
        assert!(figure.contains("<circle"), "{figure}");
    }
    assert!(traffic.contains("p99"), "{traffic}");

    let cache = section(&dom, "cache");
    assert!(cache.contains("MiB of"), "{cache}");
    assert!(cache.contains("Evictions"), "{cache}");

    let hub = section(&dom, "hub");
    assert!(hub.contains("Subscribers"), "{hub}");
    assert!(hub.contains(">idle<"), "no stream open: {hub}");

    let scheduler = section(&dom, "scheduler");
    assert!(scheduler.contains("every-second"), "{scheduler}");
    assert!(scheduler.contains("filled 1 of 1"), "{scheduler}");
    assert!(scheduler.contains("macro-daily"), "{scheduler}");

    let reloads = section(&dom, "reloads");
    assert!(reloads.contains("No reload since start"), "{reloads}");
}

/// A script run after the page's own: it names, in the body's `data-overflow`, every
/// box whose content is wider than the box (a table cut off by a scroll bar) and the
/// page itself if it scrolls sideways.
const MEASURE_OVERFLOW: &str = r#"<script>
window.addEventListener("load", function () {
  var cut = [];
  document.querySelectorAll(".scroll, section").forEach(function (box) {
    if (box.scrollWidth > box.clientWidth + 1) {
      var section = box.closest("section");
      cut.push((section ? section.id : "?") + ":" + (box.querySelector("table") || box).id);
    }
  });
  if (document.documentElement.scrollWidth > window.innerWidth) cut.push("page");
  document.body.setAttribute("data-overflow", cut.join(" ") || "none");
});
</script>
</body>"#;

/// At 1280 px, a laptop's window, every section and table of `/status` fits without
/// a sideways scroll bar (the protection table, eight columns wide, used to be cut
/// off in a third of the width).
#[tokio::test]
#[ignore = "needs Chromium: scripts/test installs it and runs the ignored tests"]
async fn the_status_page_fits_a_1280_pixel_window() {
    let (env, admin) = status_env().await;
    traffic(&env).await;
    settled(&env, &admin).await;
    let html = support::text(&format!("{admin}/status")).await;
    assert!(html.contains("</body>"));
    let page = std::env::temp_dir().join(format!("mdproxy-status-{}.html", std::process::id()));
    std::fs::write(&page, html.replacen("</body>", MEASURE_OVERFLOW, 1)).unwrap();
    let dom = rendered_dom_at(&format!("file://{}", page.display()), "1280,900").await;
    let _ = std::fs::remove_file(&page);
    assert!(
        dom.contains(r#"id="upstream-targets""#),
        "the protection table rendered: {dom}"
    );
    let overflow = dom
        .split(r#"data-overflow=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("the measuring script ran: {dom}"));
    assert_eq!(overflow, "none", "cut off at 1280 px");
}
