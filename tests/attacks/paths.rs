//! Plugin-controlled paths the host reads on a plugin's behalf: FaustBot's
//! frontend route and the manifest (plugin.toml) itself. A plugin owns its
//! directory, links included; what it links to must never reach a reply.

use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::json;

use crate::util::site::Site;
use crate::util::write;

/// A FaustBot plugin that registers nothing (its worker starts and idles).
fn faust_plugin(site: &Site, name: &str) {
    let dir = site.plugin_dir(name);
    write(
        &dir.join("plugin.json"),
        &json!({"id": name, "name": name, "version": "0.1.0", "entry": "impl.py"}).to_string(),
    );
    write(
        &dir.join("impl.py"),
        "from faust_backend.plugin_system import FaustPlugin\n\n\
         class Plugin(FaustPlugin):\n    pass\n\n\
         def get_plugin():\n    return Plugin()\n",
    );
}

/// Every reply and console output checked must lack `secret`.
fn assert_absent(secret: &str, what: &str, text: &str) {
    assert!(!text.contains(secret), "{what} shows the secret `{secret}`:\n{text}");
}

/// The attacker: a FaustBot plugin whose `frontend` is a symlink to a
/// directory outside (holding a secret file), and one whose real `frontend/`
/// holds a symlink to that secret file and a symlink to that directory; then
/// asks the unauthenticated frontend route for them, also with `..` spelled
/// plainly and percent-encoded. Must hold: the secret's content appears in no
/// response (each is a 404), while a real frontend file is still served.
#[test]
fn the_frontend_route_serves_nothing_through_a_link_or_dot_dot() {
    let secret = "SECRET-FRONTEND-7c1e5a";
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("secret.js"), &format!("const key = '{secret}';\n"));
    let site = Site::new();
    write(&site.home().join("outside-in-home.js"), &format!("// {secret}\n"));

    faust_plugin(&site, "linkfront");
    symlink(outside.path(), site.plugin_dir("linkfront").join("frontend")).unwrap();

    faust_plugin(&site, "inner");
    let front = site.plugin_dir("inner").join("frontend");
    write(&front.join("ok.js"), "console.log('fine');\n");
    symlink(outside.path().join("secret.js"), front.join("leak.js")).unwrap();
    symlink(outside.path(), front.join("sub")).unwrap();
    symlink(site.home().join("outside-in-home.js"), front.join("home.js")).unwrap();

    let d = site.start(&[]);
    let ok = d.get("/faust/plugins/inner/frontend/ok.js");
    assert_eq!((ok.status, ok.body.as_str()), (200, "console.log('fine');\n"), "a real frontend file is served");
    for path in [
        "/faust/plugins/linkfront/frontend/secret.js",
        "/faust/plugins/inner/frontend/leak.js",
        "/faust/plugins/inner/frontend/sub/secret.js",
        "/faust/plugins/inner/frontend/home.js",
        "/faust/plugins/inner/frontend/..%2f..%2foutside-in-home.js",
        "/faust/plugins/inner/frontend/%2e%2e/%2e%2e/%2e%2e/outside-in-home.js",
        "/faust/plugins/inner/frontend/%2E%2E%2F%2E%2E%2F%2E%2E%2Foutside-in-home.js",
        "/faust/plugins/inner/frontend/../../../outside-in-home.js",
        "/faust/plugins/inner/frontend/sub%2fsecret.js",
        "/faust/plugins/%2e%2e/frontend/outside-in-home.js",
    ] {
        let r = d.get(path);
        assert_absent(secret, path, &r.body);
        assert_ne!(r.status, 200, "{path}: {}", r.body);
    }
    for path in ["/faust/admin/plugins/assets", "/api/agent/plugins", "/api/plugins"] {
        assert_absent(secret, path, &d.get(path).body);
    }
    let (_, stderr) = d.stop();
    assert_absent(secret, "the daemon's log", &stderr);
}

/// The attacker: plugins whose plugin.toml is a symlink — to a file outside
/// whose first line is a secret (`/etc/shadow`-like, not TOML), to a valid
/// TOML file outside carrying a secret `version`, and to another plugin's
/// manifest; and a FaustBot plugin whose plugin.json is a link to a JSON
/// file outside carrying a secret `version`. Then the plugin list and doctor report it, over HTTP (no token
/// needed for `GET /api/plugins`) and on the command line. Must hold: no
/// output shows the secret text, each such plugin is listed with an error
/// naming its manifest file and the link, and it is not loaded (no hooks).
#[test]
fn a_plugin_toml_that_is_a_link_is_refused_unread() {
    let shadow_secret = "S3CRET-HASH-e1f2a9";
    let toml_secret = "SECRET-IN-TOML-9f8e";
    let json_secret = "SECRET-IN-JSON-41d0";
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("shadow"), &format!("root:$6${shadow_secret}:19000:0:99999:7:::\nbin:*:19000::::::\n"));
    write(
        &outside.path().join("valid.toml"),
        &format!("name = \"tomllink\"\nversion = \"{toml_secret}\"\n[hooks]\nruntime = \"bash\"\n"),
    );
    write(&outside.path().join("valid.json"), &json!({"id": "jsonlink", "version": json_secret}).to_string());
    let site = Site::new();
    let victim = site.plugin_dir("victim");
    write(&victim.join("hooks/ingest.sh"), "#!/bin/bash\necho '{\"type\":\"ingest_result\",\"memories\":[]}'\n");
    write(
        &victim.join("plugin.toml"),
        "name = \"victim\"\nversion = \"1.0.0\"\n[hooks]\nruntime = \"bash\"\ningest = \"hooks/ingest.sh\"\n",
    );
    let link = |name: &str, target: &Path| {
        std::fs::create_dir_all(site.plugin_dir(name)).unwrap();
        write(&site.plugin_dir(name).join("hooks/ingest.sh"), "#!/bin/bash\necho '{}'\n");
        symlink(target, site.plugin_dir(name).join("plugin.toml")).unwrap();
    };
    link("shadowlink", &outside.path().join("shadow"));
    link("tomllink", &outside.path().join("valid.toml"));
    link("copycat", &victim.join("plugin.toml"));
    write(&site.plugin_dir("jsonlink").join("impl.py"), "def get_plugin():\n    return None\n");
    symlink(outside.path().join("valid.json"), site.plugin_dir("jsonlink").join("plugin.json")).unwrap();

    let check_list = |what: &str, list: &serde_json::Value| {
        let text = list.to_string();
        assert_absent(shadow_secret, what, &text);
        assert_absent(toml_secret, what, &text);
        assert_absent(json_secret, what, &text);
        for (name, file) in [
            ("shadowlink", "plugin.toml"),
            ("tomllink", "plugin.toml"),
            ("copycat", "plugin.toml"),
            ("jsonlink", "plugin.json"),
        ] {
            let entry = list.as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name}"));
            let error = entry["error"].as_str().unwrap_or_else(|| panic!("{what}: {name} loaded: {entry}"));
            assert!(error.contains(file) && error.contains("symbolic link"), "{what}: {error}");
            assert_eq!(entry["hooks"], json!([]), "{what}: {entry}");
        }
        let victim = list.as_array().unwrap().iter().find(|p| p["name"] == "victim").unwrap();
        assert_eq!(victim["hooks"], json!(["ingest"]), "the victim itself still loads: {victim}");
    };

    let d = site.start(&[]);
    let r = d.get("/api/plugins");
    assert_eq!(r.status, 200, "{}", r.body);
    check_list("GET /api/plugins", &r.json());
    let doctor = d.get("/api/plugins/doctor");
    assert_absent(shadow_secret, "GET /api/plugins/doctor", &doctor.body);
    assert_absent(toml_secret, "GET /api/plugins/doctor", &doctor.body);
    assert_absent(json_secret, "GET /api/plugins/doctor", &doctor.body);
    let (_, stderr) = d.stop();
    assert_absent(shadow_secret, "the daemon's log", &stderr);
    assert_absent(toml_secret, "the daemon's log", &stderr);
    assert_absent(json_secret, "the daemon's log", &stderr);

    let run = |args: &[&str]| {
        let out = crate::util::ctxhost().arg("--home").arg(site.home()).args(args).output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (json_list, _) = run(&["plugin", "list", "--json"]);
    check_list("ctxhost plugin list --json", &serde_json::from_str(&json_list).unwrap());
    for args in [&["plugin", "list"][..], &["doctor"], &["doctor", "--json"]] {
        let (stdout, stderr) = run(args);
        let output = format!("{stdout}{stderr}");
        assert_absent(shadow_secret, &args.join(" "), &output);
        assert_absent(toml_secret, &args.join(" "), &output);
        assert_absent(json_secret, &args.join(" "), &output);
        assert!(output.contains("symbolic link"), "{}: says why\n{output}", args.join(" "));
    }
}
