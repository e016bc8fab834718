//! The dashboard (`GET /` of `ctxhost serve`) in real browsers: Debian's
//! `chromium`, headless, driven through `chromedriver`, and Debian's
//! `firefox-esr`, headless, through `geckodriver` (WebDriver, with
//! fantoccini), against a real daemon on a loopback port. Each test starts
//! its own WebDriver server on a free port and a browser with a fresh
//! profile; what the page shows is checked against what the API and the
//! plugins saw. Screenshots are kept in `<target>/tmp/dashboard/` for a
//! human to look at.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Driver, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::util::http::Daemon;
use crate::util::site::Site;
use crate::util::{require_program, write};

/// Chromium's flags: headless, and none of its own network traffic (this
/// machine's closed network refuses those connections, which would show as
/// errors).
const CHROMIUM_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,800",
];

/// Firefox's preferences: the page's console printed (read by
/// `console_errors`), and none of its own network traffic.
fn firefox_prefs() -> Value {
    json!({
        "devtools.console.stdout.content": true,
        "devtools.console.stdout.chrome": false,
        "browser.shell.checkDefaultBrowser": false,
        "app.update.disabledForTesting": true,
        "browser.safebrowsing.malware.enabled": false,
        "browser.safebrowsing.phishing.enabled": false,
        "network.captive-portal-service.enabled": false,
        "network.connectivity-service.enabled": false,
        "datareporting.policy.dataSubmissionEnabled": false,
        "toolkit.telemetry.reportingpolicy.firstRun": false,
    })
}

/// How long the page may take to show what a test waits for.
const WAIT: Duration = Duration::from_secs(20);

/// A browser the dashboard must work in (the issue: a current Chromium and
/// Firefox).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Engine {
    /// Debian's `chromium` under `chromedriver`.
    Chromium,
    /// Debian's `firefox-esr` under `geckodriver` (crates.io).
    Firefox,
}

/// A headless browser under its own WebDriver server; both stop when dropped.
struct Browser {
    rt: tokio::runtime::Runtime,
    driver: Option<Driver>,
    engine: Engine,
    webdriver: Child,
    /// Firefox's console, as it prints it (geckodriver's output), and how
    /// much of it `console_errors` has read.
    output: Option<(PathBuf, std::cell::Cell<usize>)>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Headless Chromium.
    fn start() -> Browser {
        Browser::of(Engine::Chromium)
    }

    fn of(engine: Engine) -> Browser {
        let port = free_port();
        let profile = tempfile::tempdir().unwrap();
        let mut output = None;
        let (webdriver, caps) = match engine {
            Engine::Chromium => {
                require_program("chromium", "chromium chromium-driver");
                require_program("chromedriver", "chromium chromium-driver");
                let chromedriver = Command::new("chromedriver")
                    .arg(format!("--port={port}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start chromedriver");
                let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| (*a).to_owned()).collect();
                args.push(format!("--user-data-dir={}", profile.path().join("chromium").display()));
                let caps = json!({
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": chromium_binary(), "args": args},
                    "goog:loggingPrefs": {"browser": "ALL"},
                });
                (chromedriver, caps)
            }
            Engine::Firefox => {
                let firefox = firefox_binary();
                let path = std::env::var_os("PATH");
                if ctxhost::runner::process::find_on_path("geckodriver", path.as_deref()).is_none() {
                    panic!(
                        "`geckodriver` is not installed, and this test drives Firefox through it. Run \
                         `scripts/test.sh` (it installs what is missing) or `cargo install geckodriver`."
                    );
                }
                let log = profile.path().join("firefox-output.txt");
                let out = std::fs::File::create(&log).unwrap();
                let geckodriver = Command::new("geckodriver")
                    .arg(format!("--port={port}"))
                    .env("MOZ_HEADLESS", "1")
                    .stdin(Stdio::null())
                    .stdout(out.try_clone().unwrap())
                    .stderr(out)
                    .spawn()
                    .expect("start geckodriver");
                output = Some((log, std::cell::Cell::new(0)));
                let dir = profile.path().join("firefox");
                std::fs::create_dir_all(&dir).unwrap();
                let caps = json!({
                    "browserName": "firefox",
                    "moz:firefoxOptions": {
                        "binary": firefox,
                        "args": ["-headless", "-profile", dir.display().to_string()],
                        "prefs": firefox_prefs(),
                    },
                });
                (geckodriver, caps)
            }
        };
        let ready = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                ready.elapsed() < Duration::from_secs(20),
                "{engine:?}'s WebDriver server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let Value::Object(caps) = caps else { unreachable!() };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let driver = rt
            .block_on(
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps)
                    .connect(&format!("http://127.0.0.1:{port}")),
            )
            .unwrap_or_else(|e| panic!("a {engine:?} session through its WebDriver server: {e}"));
        let b = Browser { rt, driver: Some(driver), engine, webdriver, output, _profile: profile };
        if engine == Engine::Firefox {
            b.rt.block_on(b.driver().set_window_size(1280, 800)).unwrap();
        }
        b
    }

    fn driver(&self) -> &Driver {
        self.driver.as_ref().unwrap()
    }

    fn open(&self, url: &str) {
        self.rt.block_on(self.driver().goto(url)).unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// The first element matching `css`, once there is one.
    fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.rt
            .block_on(async {
                let start = Instant::now();
                loop {
                    match self.driver().find(Locator::Css(css)).await {
                        Ok(e) => return Ok(e),
                        Err(e) if start.elapsed() > WAIT => return Err(e),
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
            .unwrap_or_else(|e| panic!("no element `{css}` within {WAIT:?}: {e}"))
    }

    /// Waits until the text of the first element matching `css` contains
    /// `wanted`; returns that text.
    fn wait_text(&self, css: &str, wanted: &str) -> String {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < WAIT {
            if let Ok(e) = self.rt.block_on(self.driver().find(Locator::Css(css))) {
                last = self.rt.block_on(e.text()).unwrap_or_default();
                if last.contains(wanted) {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let page =
            self.rt.block_on(self.driver().execute("return document.body.innerText", vec![])).unwrap_or_default();
        panic!(
            "`{css}` never showed {wanted:?} within {WAIT:?}; it showed:\n{last}\nthe page:\n{}",
            page.as_str().unwrap_or_default()
        );
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.rt.block_on(e.click()).unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    /// Replaces the value of the input matching `css` by `text`, as typed.
    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.rt.block_on(e.clear()).unwrap();
        self.rt.block_on(e.send_keys(text)).unwrap_or_else(|e| panic!("type into `{css}`: {e}"));
    }

    /// One key pressed and released where the focus is.
    fn press(&self, key: fantoccini::key::Key) {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions};
        let c: char = key.into();
        let keys =
            KeyActions::new("keyboard".into()).then(KeyAction::Down { value: c }).then(KeyAction::Up { value: c });
        self.rt.block_on(self.driver().perform_actions(keys)).unwrap_or_else(|e| panic!("press {c:?}: {e}"));
    }

    fn select(&self, css: &str, value: &str) {
        let e = self.find(css);
        self.rt.block_on(e.select_by_value(value)).unwrap_or_else(|e| panic!("select {value} in `{css}`: {e}"));
    }

    fn js(&self, script: &str) -> Value {
        self.rt.block_on(self.driver().execute(script, vec![])).unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// A chromedriver command the WebDriver standard has no word for.
    fn raw(&self, path: &'static str, body: Value) -> Value {
        self.rt
            .block_on(self.driver().issue_cmd(Chromedriver { path, body }))
            .unwrap_or_else(|e| panic!("chromedriver {path}: {e}"))
    }

    /// The console's errors since the last call: uncaught exceptions,
    /// `console.error`, failed requests. Chromium: chromedriver's browser log
    /// (level SEVERE). Firefox: what it prints of the page's console
    /// (`devtools.console.stdout.content`), and the page's requests that
    /// answered 400 or more (resource timing), as Firefox prints no line for
    /// those.
    fn console_errors(&self) -> Vec<String> {
        match self.engine {
            Engine::Chromium => {
                let entries = self.raw("se/log", json!({"type": "browser"}));
                entries
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
                    .collect()
            }
            Engine::Firefox => {
                let (log, read) = self.output.as_ref().unwrap();
                let text = std::fs::read(log).unwrap_or_default();
                let new = String::from_utf8_lossy(&text[read.get().min(text.len())..]).into_owned();
                read.set(text.len());
                // One message per block: its first line and the indented
                // lines (and stack frames) after it. The browser's own (its code is at
                // resource:// or chrome:// URLs) are not the page's.
                let mut blocks: Vec<String> = Vec::new();
                for line in new.lines() {
                    let frame = line.contains('@') && line.contains("://") && !line.contains(' ');
                    if line.starts_with([' ', '\t']) || frame {
                        if let Some(b) = blocks.last_mut() {
                            b.push('\n');
                            b.push_str(line);
                        }
                    } else {
                        blocks.push(line.to_owned());
                    }
                }
                let mut errors: Vec<String> = blocks
                    .into_iter()
                    .filter(|b| b.contains("console.error:") || b.contains("JavaScript error:"))
                    .filter(|b| !b.contains("resource://") && !b.contains("chrome://"))
                    .collect();
                let failed = self.js(
                    "const seen = window.__ctxhostSeen || 0; const all = performance.getEntriesByType('resource'); \
                     window.__ctxhostSeen = all.length; \
                     return all.slice(seen).filter(e => e.responseStatus >= 400).map(e => `${e.responseStatus} ${e.name}`)",
                );
                errors.extend(failed.as_array().unwrap().iter().map(|e| e.as_str().unwrap_or_default().to_owned()));
                errors
            }
        }
    }

    /// A screenshot, kept as `<target>/tmp/dashboard/<name>.png`; checked to
    /// be an image of the window's size that is not one flat colour.
    fn screenshot(&self, name: &str) -> PathBuf {
        let bytes = self.rt.block_on(self.driver().screenshot()).unwrap();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, &bytes).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut pixels).unwrap();
        let channels = info.color_type.samples();
        let pixels = &pixels[..info.buffer_size()];
        let first = &pixels[..channels];
        let differing = pixels.chunks(channels).filter(|p| p != &first).count();
        let total = (info.width * info.height) as usize;
        assert!(info.width >= 300 && info.height >= 300, "{}: {}x{}", path.display(), info.width, info.height);
        assert!(
            differing * 100 > total * 2,
            "{}: only {differing} of {total} pixels differ from the first: the page is blank",
            path.display()
        );
        path
    }

    /// The page answered the token question with `token`.
    fn give_token(&self, token: &str) {
        self.find("#token-dialog[open]");
        self.type_into("#token-input", token);
        self.click("#token-form button[type=submit]");
    }
}

/// `POST /session/{id}/<path>` with `body`: chromedriver's own commands.
#[derive(Debug)]
struct Chromedriver {
    path: &'static str,
    body: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Chromedriver {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/{}", session.unwrap_or_default(), self.path))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(self.body.to_string()))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(driver) = self.driver.take() {
            let _ = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), driver.close()).await });
        }
        let _ = self.webdriver.kill();
        let _ = self.webdriver.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Firefox: Debian's `firefox-esr`, or a `firefox`.
fn firefox_binary() -> String {
    let path = std::env::var_os("PATH");
    ["firefox-esr", "firefox"]
        .iter()
        .find_map(|p| ctxhost::runner::process::find_on_path(p, path.as_deref()))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| {
            panic!(
                "`firefox-esr` is not installed, and this test runs it for real. Run `scripts/test.sh` \
                 (it installs what is missing) or `apt-get install -y firefox-esr`."
            )
        })
}

/// Debian's binary (`/usr/bin/chromium` is a wrapper script chromedriver
/// also accepts).
fn chromium_binary() -> String {
    let path = std::env::var_os("PATH");
    ctxhost::runner::process::find_on_path("chromium", path.as_deref())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/usr/bin/chromium".to_owned())
}

/// A bash plugin answering `ingest` with one memory naming the message, and
/// writing `<name> heard: <message>` to stderr.
fn memory_plugin(site: &Site, name: &str) {
    write(
        &site.plugin_dir(name).join("plugin.toml"),
        &format!(
            "name = \"{name}\"\nversion = \"1.2.3\"\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n\
             after_turn = \"hooks/after_turn.sh\"\n"
        ),
    );
    write(
        &site.plugin_dir(name).join("hooks/ingest.sh"),
        &format!(
            "cat > /dev/null\necho \"{name} heard: $LIBREFANG_MESSAGE\" >&2\n\
             printf '{{\"memories\":[{{\"content\":\"{name} recalls %s\"}}]}}\\n' \"$LIBREFANG_MESSAGE\"\n"
        ),
    );
    write(&site.plugin_dir(name).join("hooks/after_turn.sh"), "cat > /dev/null\necho '{\"type\":\"ok\"}'\n");
}

/// The context engine's stack: `names`, in order (`config.toml`).
fn stack(site: &Site, names: &[&str]) {
    let list: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    write(&site.home().join("config.toml"), &format!("[context_engine]\nplugin_stack = [{}]\n", list.join(", ")));
}

/// A plugin that cannot load: its hook script is not there.
fn broken_plugin(site: &Site, name: &str) {
    write(
        &site.plugin_dir(name).join("plugin.toml"),
        &format!(
            "name = \"{name}\"\nversion = \"0.0.1\"\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/missing.sh\"\n"
        ),
    );
}

fn url(daemon: &Daemon, fragment: &str) -> String {
    format!("http://{}/{fragment}", daemon.addr)
}

/// A page with a broken plugin beside a working one, in `engine`: the broken
/// one's row shows its full error as the API has it, every view opens
/// through its link, no console error. The daemon and browser are left
/// running for more.
fn every_view_and_a_broken_plugin(engine: Engine) -> (Site, Daemon, Browser) {
    let prefix = if engine == Engine::Chromium { "" } else { "firefox-" };
    let site = Site::new();
    memory_plugin(&site, "notes");
    broken_plugin(&site, "broken");
    stack(&site, &["notes"]);
    let daemon = site.start(&[]);
    // A turn, so the turns view has an agent to show.
    assert_eq!(daemon.post("/api/agents/a1/ingest", r#"{"message":"hello"}"#).status, 200);
    let api_error = daemon.get("/api/plugins").json();
    let api_error = api_error.as_array().unwrap().iter().find(|p| p["name"] == "broken").unwrap()["error"].clone();
    let api_error = api_error.as_str().expect("the API reports the broken plugin's error").to_owned();

    let b = Browser::of(engine);
    b.open(&url(&daemon, ""));
    // The broken plugin's row says error, and the row below holds the error
    // itself, as the API has it.
    b.wait_text("tr[data-plugin=broken][data-status=error]", "error");
    let shown = b.wait_text("pre[data-error-of=broken]", "missing.sh");
    assert_eq!(shown.trim(), api_error.trim(), "the page shows the full error");
    b.wait_text("tr[data-plugin=notes][data-status=running]", "1.2.3");
    b.screenshot(&format!("{prefix}plugins-1280x800"));

    // Every view, through its link.
    for (view, shows) in [
        ("health", "#view-health"),
        ("logs", "#log-lines"),
        ("turns", "#turn-agent"),
        ("memory", "#memory-agent"),
        ("agent", "#agent-vfs"),
        ("plugins", "#plugin-table"),
    ] {
        b.click(&format!("#nav a[data-view={view}]"));
        b.find(shows);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(b.js("return location.hash"), json!(format!("#{view}")));
        b.screenshot(&format!("{prefix}view-{view}"));
    }
    let status = b.js("return document.getElementById('status').textContent");
    assert!(!status.as_str().unwrap_or_default().contains("page error"), "{status}");
    let errors = b.console_errors();
    assert!(errors.is_empty(), "{engine:?}: console errors:\n{}", errors.join("\n"));
    // The errors are seen at all: a console.error, an uncaught exception
    // and a failed request of the page are reported.
    b.js("console.error('probe one'); setTimeout(() => { throw new Error('probe two'); }); \
          fetch('/dashboard/probe-three.js'); return 1");
    std::thread::sleep(Duration::from_millis(500));
    let probes = b.console_errors().join("\n");
    for probe in ["probe one", "probe two", "probe-three.js"] {
        assert!(probes.contains(probe), "{engine:?}: {probe} was not reported as an error:\n{probes}");
    }
    (site, daemon, b)
}

#[test]
fn the_page_shows_every_view_without_console_errors_and_lists_a_broken_plugin_with_its_error() {
    let (_site, daemon, b) = every_view_and_a_broken_plugin(Engine::Chromium);

    // Keyboard: Tab from the top reaches the view links, with a visible focus ring.
    b.open(&url(&daemon, "?keyboard#plugins"));
    b.find("#plugin-table");
    let mut reached = false;
    let mut seen = Vec::new();
    for _ in 0..4 {
        b.press(fantoccini::key::Key::Tab);
        let focused = b.js(
            "const e = document.activeElement; return [e.tagName, e.textContent, getComputedStyle(e).outlineStyle]",
        );
        seen.push(focused.clone());
        if focused[0] == "A" && focused[1] == "Health" {
            assert_ne!(focused[2], "none", "the focused link shows no outline: {focused}");
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab never reached the Health link: {seen:?}");
    b.press(fantoccini::key::Key::Enter);
    b.find("#view-health");

    // Dark mode (prefers-color-scheme): dark background, light text.
    b.raw(
        "goog/cdp/execute",
        json!({"cmd": "Emulation.setEmulatedMedia", "params": {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}}),
    );
    b.open(&url(&daemon, "#plugins"));
    b.find("pre[data-error-of=broken]");
    let colours = b.js("const s = getComputedStyle(document.body); return [s.backgroundColor, s.color]");
    let lightness = |c: &Value| -> u32 {
        let text = c.as_str().unwrap();
        text.trim_start_matches("rgb(").trim_end_matches(')').split(',').map(|n| n.trim().parse::<u32>().unwrap()).sum()
    };
    assert!(lightness(&colours[0]) < 150 && lightness(&colours[1]) > 500, "dark mode colours: {colours}");
    b.screenshot("plugins-dark");
    b.raw("goog/cdp/execute", json!({"cmd": "Emulation.setEmulatedMedia", "params": {"features": []}}));
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));

    // A narrow window: nothing wider than the window, still not blank.
    b.rt.block_on(b.driver().set_window_size(390, 844)).unwrap();
    b.find("#plugin-table");
    std::thread::sleep(Duration::from_millis(200));
    let widths = b.js("return [document.documentElement.scrollWidth, window.innerWidth]");
    assert!(widths[0].as_f64() <= widths[1].as_f64(), "the page is wider than a narrow window: {widths}");
    b.screenshot("plugins-narrow");
}

#[test]
fn with_a_token_the_page_asks_once_and_disabling_a_plugin_there_disables_it_for_every_client() {
    disable_with_a_token(Engine::Chromium);
}

/// The token asked once, a plugin disabled and enabled in `engine`, as
/// every client sees it.
fn disable_with_a_token(engine: Engine) {
    let site = Site::new();
    memory_plugin(&site, "notes");
    memory_plugin(&site, "other");
    let daemon = Daemon::start(site.home(), &["--token", "s3cret"], &[]);
    let b = Browser::of(engine);
    b.open(&url(&daemon, "#plugins"));
    b.wait_text("tr[data-plugin=notes]", "running");
    b.click("button[data-action=disable][data-plugin=notes]");
    // The action is guarded: the page asks for the token, then does it.
    b.give_token("s3cret");
    b.find("tr[data-plugin=notes][data-status=disabled]");
    let list = daemon.get("/api/plugins").json();
    let state = |name: &str| list.as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()["state"].clone();
    assert_eq!(state("notes"), "disabled", "{list}");
    assert_eq!(state("other"), "loaded", "{list}");
    // Kept for the tab: enabling again asks nothing.
    b.click("button[data-action=enable][data-plugin=notes]");
    b.find("tr[data-plugin=notes][data-status=running]");
    assert_eq!(b.js("return document.getElementById('token-dialog').open"), json!(false));
    let list = daemon.get("/api/plugins").json();
    assert_eq!(list.as_array().unwrap().iter().find(|p| p["name"] == "notes").unwrap()["state"], "loaded");
    let errors = b.console_errors();
    // The one 401 that made the page ask is the only failed request.
    assert!(errors.iter().all(|e| e.contains("401")), "console errors:\n{}", errors.join("\n"));
}

#[test]
fn a_test_hook_round_trip_shows_the_plugins_reply_and_the_elapsed_time() {
    let site = Site::new();
    memory_plugin(&site, "notes");
    let daemon = site.start(&[]);
    let b = Browser::start();
    b.open(&url(&daemon, "#plugins"));
    b.click("button[data-action=test][data-plugin=notes]");
    b.select("select[data-test-hook=notes]", "ingest");
    // Prefilled with hooks.md's example request for ingest.
    let editor = b.find("textarea[data-test-input=notes]");
    let prefilled: Value = serde_json::from_str(&b.rt.block_on(editor.prop("value")).unwrap().unwrap()).unwrap();
    assert_eq!(prefilled["type"], "ingest");
    assert_eq!(prefilled["message"], "what did I say about jazz?");
    b.type_into("textarea[data-test-input=notes]", r#"{"type":"ingest","agent_id":"a1","message":"round trip 42"}"#);
    b.click("button[data-test-run=notes]");
    let shown = b.wait_text("[data-test-result=notes]", "notes recalls round trip 42");
    assert!(shown.contains("success"), "{shown}");
    let elapsed = b.rt.block_on(b.find("[data-test-result=notes] .elapsed").text()).unwrap();
    assert!(elapsed.ends_with(" ms") && elapsed != "– ms", "elapsed: {elapsed}");
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
}

#[test]
fn a_config_form_refuses_a_wrong_type_and_saves_a_right_one_firing_config_changed() {
    let site = Site::new();
    site.python(
        "watcher",
        "[agent_config]\nLIMIT = { type = \"int\", label = \"Limit\", default = 3 }\nNAME = { type = \"str\", default = \"x\" }\n",
        &[("config_changed", "log(req)")],
    );
    let daemon = site.start(&[]);
    let b = Browser::start();
    b.open(&url(&daemon, "#agent"));
    let limit = "form[data-config-of=watcher] [data-config-key=LIMIT]";
    b.type_into(limit, "many");
    b.click("form[data-config-of=watcher] button[type=submit]");
    b.wait_text("form[data-config-of=watcher] .field[data-key=LIMIT] .field-error", "LIMIT expects an integer");
    b.wait_text("form[data-config-of=watcher] .form-result", "Not saved");
    let config = daemon.get("/api/plugins/watcher/config").json();
    assert_eq!(config["values"]["LIMIT"], 3, "nothing was sent: {config}");
    b.type_into(limit, "7");
    b.click("form[data-config-of=watcher] button[type=submit]");
    b.wait_text("form[data-config-of=watcher] .form-result", "Saved LIMIT");
    let config = daemon.get("/api/plugins/watcher/config").json();
    assert_eq!(config["values"], json!({"LIMIT": 7, "NAME": "x"}), "only the changed value was sent");
    crate::util::within(10, "config_changed reaches the plugin", || {
        site.log("watcher").iter().any(|l| l["key"] == "LIMIT" && l["new"] == 7)
    });
    assert!(!site.log("watcher").iter().any(|l| l["key"] == "NAME"), "{:?}", site.log("watcher"));
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
}

#[test]
fn the_turns_view_shows_the_memories_of_a_turn_driven_through_the_agent_api() {
    let site = Site::new();
    memory_plugin(&site, "notes");
    stack(&site, &["notes"]);
    let daemon = site.start(&[]);
    let r = daemon.post("/api/agents/a7/ingest", r#"{"message":"jazz on sunday"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = daemon.post("/api/agents/a7/after_turn", r#"{"messages":[{"role":"user","content":"jazz on sunday"}]}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let b = Browser::start();
    b.open(&url(&daemon, "#turns"));
    b.wait_text("#turn-agent", "a7");
    let shown = b.wait_text("#turn-list", "notes recalls jazz on sunday");
    assert!(shown.contains("from notes"), "the memory's source: {shown}");
    assert!(shown.contains("jazz on sunday"), "{shown}");
    b.wait_text("#turn-list table.timings", "ingest");
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
}

#[test]
fn the_stderr_tail_shows_a_line_a_hook_just_wrote_and_filters_by_plugin() {
    let site = Site::new();
    memory_plugin(&site, "notes");
    memory_plugin(&site, "diary");
    stack(&site, &["notes", "diary"]);
    let daemon = site.start(&[]);
    let b = Browser::start();
    b.open(&url(&daemon, "#logs"));
    // The held lines were read (none yet); what comes next can only come
    // through the stream (the page polls no more; it opens a stream again
    // only after one failed, which it says in the view).
    b.wait_text("#log-lines", "No stderr lines yet");
    let r = daemon.post("/api/agents/a1/ingest", r#"{"message":"tail me 314"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let shown = b.wait_text("#log-lines", "notes heard: tail me 314");
    assert!(shown.contains("diary heard: tail me 314"), "{shown}");
    let said = b.js("return document.querySelector('#view-logs .message').textContent");
    assert_eq!(said, json!(""), "the stream failed");
    let held =
        b.js("return performance.getEntriesByType('resource').filter(e => e.name.includes('/api/logs?')).length");
    assert_eq!(held, json!(1), "the held lines were read once, then the stream delivered");
    b.wait_text("#log-plugin", "diary");
    b.select("#log-plugin", "notes");
    let r = daemon.post("/api/agents/a1/ingest", r#"{"message":"second 271"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let shown = b.wait_text("#log-lines", "notes heard: second 271");
    assert!(!shown.contains("diary heard"), "filtered by plugin, yet shows diary's lines:\n{shown}");
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
}

/// The time from navigation to the plugin table drawn, with 100 plugins
/// (printed; the issue's closing note reports it).
#[test]
fn with_100_plugins_the_table_renders_quickly() {
    let site = Site::new();
    for i in 0..100 {
        memory_plugin(&site, &format!("p{i:03}"));
    }
    let daemon = site.start(&[]);
    let b = Browser::start();
    // Once for the browser's own start-up, then measured.
    b.open(&url(&daemon, "#plugins"));
    b.find("body[data-rendered]");
    b.open(&url(&daemon, "?again#plugins"));
    b.find("body[data-rendered]");
    let ms = b.js("return performance.getEntriesByName('ctxhost:plugins-rendered')[0].startTime");
    let ms = ms.as_f64().unwrap();
    let rows = b.js("return document.querySelectorAll('#plugin-rows tr[data-status]').length");
    assert_eq!(rows, json!(100));
    eprintln!("dashboard: 100 plugins, first render {ms:.0} ms after navigation");
    assert!(ms < 5000.0, "the table took {ms:.0} ms");
    b.screenshot("plugins-100");
}

#[test]
fn memory_is_searched_and_deleted_after_a_confirmation_and_a_grant_change_names_what_it_opens() {
    let site = Site::new();
    memory_plugin(&site, "notes");
    let daemon = site.start(&[]);
    let turn = json!({"messages": [
        {"role": "user", "content": "my cat is called Miso"},
        {"role": "user", "content": "I grow tomatoes in the garden"}]});
    assert_eq!(daemon.post("/api/agents/m1/after_turn", &turn.to_string()).status, 200);
    let b = Browser::start();
    b.open(&url(&daemon, "#memory"));
    b.type_into("#memory-agent", "m1");
    b.type_into("#memory-q", "cat Miso");
    b.click("form.memory-search button[type=submit]");
    b.wait_text("#memory-results", "my cat is called Miso");
    let id = b.rt.block_on(b.find("#memory-results li.memory").attr("data-id")).unwrap().unwrap();
    // Cancel first: nothing is deleted.
    b.click(&format!("button[data-delete-memory='{id}']"));
    b.wait_text("#confirm-text", "my cat is called Miso");
    b.click("#confirm-no");
    assert_eq!(daemon.get("/api/memory/m1").json()["total"], 2);
    b.click(&format!("button[data-delete-memory='{id}']"));
    b.click("#confirm-yes");
    b.wait_text("#view-memory .message", &format!("Deleted memory {id}"));
    let left = daemon.get("/api/memory/m1").json();
    assert_eq!(left["total"], 1, "{left}");
    assert_eq!(left["memories"][0]["content"], "I grow tomatoes in the garden");

    // A grant: the confirmation names what it opens; nothing changes before "Change grant".
    b.open(&url(&daemon, "#plugins"));
    b.click("button[data-action=grant][data-plugin=notes]");
    b.click("input[data-grant-network=notes]");
    b.type_into("input[data-grant-env=notes]", "NOTES_KEY");
    b.click("tr.expand[data-plugin=notes] form.grant button[type=submit]");
    let asked = b.wait_text("#confirm-text", "network access");
    assert!(asked.contains("host variable NOTES_KEY"), "{asked}");
    let grant = |d: &Daemon| {
        let list = d.get("/api/plugins").json();
        list.as_array().unwrap().iter().find(|p| p["name"] == "notes").unwrap()["grants"].clone()
    };
    assert_ne!(grant(&daemon)["network"], json!(true), "recorded before the confirmation");
    b.click("#confirm-yes");
    b.wait_text("tr.expand[data-plugin=notes] .grant-result", "Grant changed");
    let g = grant(&daemon);
    assert_eq!((&g["network"], &g["env"]), (&json!(true), &json!(["NOTES_KEY"])), "{g}");
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
}

#[test]
fn in_firefox_the_page_shows_every_view_without_console_errors_and_fits_a_narrow_window() {
    let (_site, _daemon, b) = every_view_and_a_broken_plugin(Engine::Firefox);
    b.rt.block_on(b.driver().set_window_size(390, 844)).unwrap();
    b.find("#plugin-table");
    std::thread::sleep(Duration::from_millis(200));
    let widths = b.js("return [document.documentElement.scrollWidth, window.innerWidth]");
    assert!(widths[0].as_f64() <= widths[1].as_f64(), "the page is wider than a narrow window: {widths}");
    b.screenshot("firefox-plugins-narrow");
}

#[test]
fn in_firefox_disabling_a_plugin_behind_the_token_disables_it_for_every_client() {
    disable_with_a_token(Engine::Firefox);
}

/// Appended to the reminder example's panel script in the test's copy: what
/// a hostile panel would try, each attempt's outcome written into the panel.
const SPY: &str = r#"
;(function () {
  var out = {};
  function attempt(name, f) {
    try { out[name] = 'read: ' + String(f()); } catch (e) { out[name] = 'blocked: ' + e.name; }
  }
  attempt('own_storage', function () { return sessionStorage.getItem('ctxhost-token'); });
  attempt('page_storage', function () { return window.parent.sessionStorage.getItem('ctxhost-token'); });
  attempt('page_dom', function () { return window.parent.document.getElementById('token-input').value; });
  var pre = document.createElement('pre');
  pre.id = 'spy';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
  // And a guarded call with no token of its own: refused, whatever it sends.
  fetch('/api/plugins/reminder/disable', { method: 'POST' }).then(
    function (r) { pre.dataset.disable = String(r.status); },
    function (e) { pre.dataset.disable = 'blocked: ' + e.name; });
})();
"#;

/// The reminder example's own panel in its sandboxed frame, in `engine`:
/// drawn from the reminders its `communicate` lists (through the page, with
/// the token), while the same frame's scripts cannot read the token.
fn faustbot_panel(engine: Engine) {
    let site = Site::new();
    site.example("faustbot/reminder");
    let panel_js = site.plugin_dir("reminder").join("frontend/panel.js");
    let mut js = std::fs::read_to_string(&panel_js).unwrap();
    js.push_str(SPY);
    write(&panel_js, &js);
    let daemon = Daemon::start(site.home(), &["--token", "s3cret"], &[]);
    let auth = [("Authorization", "Bearer s3cret")];
    let r = daemon.post_with(
        "/faust/plugins/reminder/communicate",
        r#"{"action":"remind","text":"water the figs 57","in_seconds":3600}"#,
        &auth,
    );
    assert_eq!(r.status, 200, "{}", r.body);

    let b = Browser::of(engine);
    b.open(&url(&daemon, "#agent/panels"));
    b.give_token("s3cret");
    b.click("details[data-panel=reminder] summary");
    let frame = b.find("details[data-panel=reminder] iframe");
    assert_eq!(b.rt.block_on(frame.attr("sandbox")).unwrap().as_deref(), Some("allow-scripts"));
    b.rt.block_on(frame.enter_frame()).unwrap();
    // The example's own script drew its list from its communicate reply.
    let shown = b.wait_text(".reminder-panel .reminder-list", "water the figs 57");
    assert!(!shown.contains("s3cret"), "{shown}");
    b.wait_text("section.plugin-panel h2", "Reminders");
    // Its own stylesheet applied too (`.reminder-panel { padding: 8px }`).
    let css = b.js("return getComputedStyle(document.querySelector('.reminder-panel')).paddingTop");
    assert_eq!(css, json!("8px"), "the panel's panel.css");
    let spy: Value = serde_json::from_str(&b.wait_text("#spy", "own_storage")).unwrap();
    for key in ["own_storage", "page_storage", "page_dom"] {
        let got = spy[key].as_str().unwrap_or_default();
        assert!(got.starts_with("blocked: "), "{engine:?}: the panel's script could {key}: {spy}");
    }
    let frame_text = b.js("return document.documentElement.outerHTML");
    assert!(!frame_text.as_str().unwrap().contains("s3cret"), "the token reached the frame");
    let spy = b.find("#spy");
    let mut disable = None;
    crate::util::within(10, "the spy's request to end", || {
        disable = b.rt.block_on(spy.attr("data-disable")).unwrap();
        disable.is_some()
    });
    let disable = disable.unwrap();
    assert_ne!(disable, "200", "a guarded call from the panel went through");
    b.rt.block_on(b.driver().enter_parent_frame()).unwrap();
    let list = crate::util::http::request(&daemon.addr, "GET", "/api/plugins", None, &auth).json();
    let reminder = list.as_array().unwrap().iter().find(|p| p["name"] == "reminder").unwrap().clone();
    assert_ne!(reminder["state"], "disabled", "{reminder}");
    b.screenshot(&format!("{engine:?}-faustbot-panel").to_lowercase());
}

#[test]
fn a_faustbot_plugins_own_panel_renders_in_its_frame_and_cannot_read_the_token() {
    faustbot_panel(Engine::Chromium);
}

#[test]
fn in_firefox_a_faustbot_plugins_own_panel_renders_and_cannot_read_the_token() {
    faustbot_panel(Engine::Firefox);
}

#[test]
fn triggers_are_created_seen_fired_and_deleted_the_vfs_marks_a_symbolic_node_and_health_charts_calls() {
    let site = Site::new();
    memory_plugin(&site, "notes");
    stack(&site, &["notes"]);
    crate::agent::service_worker(&site, "vault");
    let daemon = site.start(&[]);
    // Calls first: the health view's samples come every 5 s.
    for n in 0..3 {
        let r = daemon.post("/api/agents/h1/ingest", &json!({"message": format!("call {n}")}).to_string());
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let out = crate::agent::calls(
        &daemon,
        "vault",
        json!([
            ["vfs.write_symbolic", {"path": "/plugins/vault/live"}],
            ["vfs.write", {"path": "/plugins/vault/readme.txt", "content": "a plain file"}],
        ]),
    );
    assert_eq!(out[0], json!({"ok": "/plugins/vault/live"}), "{out:?}");
    let b = Browser::start();

    // Triggers: created in the page, listed, fired, deleted.
    b.open(&url(&daemon, "#agent/triggers"));
    b.type_into("form.trigger-create input[name=id]", "tick-57");
    b.select("form.trigger-create select[name=type]", "interval");
    b.type_into("form.trigger-create input[name=when]", "1");
    b.type_into("form.trigger-create textarea[name=payload]", r#"{"n": 7}"#);
    b.click("form.trigger-create button[type=submit]");
    b.wait_text("#agent-triggers .form-result", "Created tick-57");
    b.wait_text("table.triggers tr[data-trigger=tick-57]", "every 1 s");
    let listed = daemon.get("/api/triggers/tick-57").json();
    assert_eq!((&listed["interval_seconds"], &listed["payload"]), (&json!(1), &json!({"n": 7})), "{listed}");
    b.wait_text("#agent-triggers .fired", "tick-57");
    assert!(
        daemon.get("/api/triggers/fired").json().as_array().unwrap().iter().any(|t| t["id"] == "tick-57"),
        "the page shows a firing the daemon has not recorded"
    );
    b.click("table.triggers tr[data-trigger=tick-57] button.danger");
    b.wait_text("#confirm-text", "tick-57");
    b.click("#confirm-yes");
    b.wait_text("#agent-triggers .form-result", "Deleted tick-57");
    let ids: Vec<Value> =
        daemon.get("/api/triggers").json().as_array().unwrap().iter().map(|t| t["id"].clone()).collect();
    assert!(!ids.contains(&json!("tick-57")), "GET /api/triggers still has it: {ids:?}");
    crate::util::within(10, "the row to go", || {
        b.js("return document.querySelector('tr[data-trigger=\"tick-57\"]') === null") == json!(true)
    });

    // The vfs tree: the symbolic node marked with its owner, its content computed on reading.
    b.click("#agent-vfs button.tree-item[data-path='/plugins']");
    b.click("#agent-vfs button.tree-item[data-path='/plugins/vault']");
    let live = b.wait_text("#agent-vfs button.tree-item[data-path='/plugins/vault/live']", "symbolic");
    assert!(live.contains("symbolic · vault"), "{live}");
    let kind = b.rt.block_on(b.find("button.tree-item[data-path='/plugins/vault/live']").attr("data-kind")).unwrap();
    assert_eq!(kind.as_deref(), Some("symbolic"));
    let plain = b.wait_text("#agent-vfs button.tree-item[data-path='/plugins/vault/readme.txt']", "readme.txt");
    assert!(!plain.contains("symbolic"), "a plain file marked symbolic: {plain}");
    b.click("#agent-vfs button.tree-item[data-path='/plugins/vault/live']");
    let shown = b.wait_text("#agent-vfs .vfs-content", "/plugins/vault/live read");
    assert!(shown.contains("computed by vault"), "{shown}");
    b.click("#agent-vfs button.tree-item[data-path='/plugins/vault/readme.txt']");
    b.wait_text("#agent-vfs .vfs-content pre", "a plain file");
    b.screenshot("agent-triggers-vfs");

    // Health: the hook's row counts the 3 calls and its chart has a line above zero.
    b.open(&url(&daemon, "#health"));
    let row = "#health-series tr[data-plugin=notes][data-hook=ingest]";
    let calls = b.wait_text(&format!("{row} td.num"), "3");
    assert_eq!(calls.trim(), "3", "the calls column");
    let line = b.find(&format!("{row} td.chart svg polyline"));
    let points = b.rt.block_on(line.attr("points")).unwrap().unwrap();
    let ys: Vec<f64> = points.split(' ').filter_map(|p| p.split(',').nth(1)?.parse().ok()).collect();
    assert!(ys.len() >= 2 && ys.iter().any(|y| *y < 20.0), "a flat calls chart: {points}");
    let series = daemon.get("/api/health/series").json();
    let calls: u64 = series["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["plugin"] == "notes" && s["hook"] == "ingest")
        .flat_map(|s| s["samples"].as_array().unwrap().iter().map(|x| x["calls"].as_u64().unwrap()))
        .sum();
    assert_eq!(calls, 3, "{series}");
    b.screenshot("health-chart");
    let errors = b.console_errors();
    assert!(errors.is_empty(), "console errors:\n{}", errors.join("\n"));
}
