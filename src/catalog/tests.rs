// A failed unwrap is a test failure with a backtrace; that is all a test needs.
#![allow(clippy::unwrap_used)]

use super::*;

// ---- helpers ------------------------------------------------------------------------------------

fn catalog(prefixed: bool, namespaces: &[&str]) -> Catalog {
    Catalog::new(Namer::new("__", prefixed), namespaces.iter().map(|n| n.to_string()).collect())
}

fn tool(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": { "text": { "type": "string" } } },
    })
}

fn tools(names: &[&str]) -> Listing {
    Listing { tools: names.iter().map(|n| tool(n, &format!("the {n} tool"))).collect(), ..Listing::default() }
}

fn exposed_names(snapshot: &Snapshot) -> Vec<&str> {
    snapshot.tools.iter().map(|t| &*t.exposed).collect()
}

fn json_names(raw: &JsonArray, key: &str) -> Vec<String> {
    let items: Vec<Value> = serde_json::from_str(raw.get()).expect("a JSON array");
    items.iter().map(|t| t[key].as_str().expect("a string").to_string()).collect()
}

/// alpha offers tools, a prompt, a resource and a template; beta offers tools only.
fn alpha_listing() -> Listing {
    Listing {
        tools: vec![tool("zeta", "last"), tool("echo", "echoes")],
        prompts: vec![json!({ "name": "greet", "description": "says hello" })],
        resources: vec![json!({ "uri": "file:///notes.txt", "name": "notes" })],
        templates: vec![json!({ "uriTemplate": "db://rows/{id}", "name": "row" })],
    }
}

fn beta_listing() -> Listing {
    tools(&["add", "echo"])
}

// ---- names and order ----------------------------------------------------------------------------

#[test]
fn exposed_names_are_prefixed_and_sorted_whatever_the_upstream_order() {
    let catalog = catalog(true, &["beta", "alpha"]);
    catalog.update(1, Some(alpha_listing()));
    catalog.update(0, Some(beta_listing()));
    let snapshot = catalog.snapshot();

    let expected = ["alpha__echo", "alpha__zeta", "beta__add", "beta__echo"];
    assert_eq!(exposed_names(&snapshot), expected);
    assert_eq!(json_names(&snapshot.tools_json, "name"), expected);

    // The definition carries the exposed name; the route keeps the upstream's own.
    let echo = snapshot.tool("alpha__echo").expect("routed");
    assert_eq!(echo.definition["name"], json!("alpha__echo"));
    assert_eq!(echo.definition["description"], json!("echoes"));
    assert_eq!(echo.route.upstream, 1);
    assert_eq!(&*echo.route.namespace, "alpha");
    assert_eq!(&*echo.route.name, "echo");
    let add = snapshot.tool("beta__add").expect("routed");
    assert_eq!(add.route.upstream, 0);
    assert_eq!(&*add.route.name, "add");

    assert_eq!(json_names(&snapshot.prompts_json, "name"), ["alpha__greet"]);
    assert_eq!(json_names(&snapshot.resources_json, "uri"), ["alpha+file:///notes.txt"]);
    assert_eq!(json_names(&snapshot.templates_json, "uriTemplate"), ["alpha+db://rows/{id}"]);
}

#[test]
fn listing_bytes_do_not_depend_on_arrival_or_listing_order() {
    let a = catalog(true, &["alpha", "beta"]);
    a.update(0, Some(alpha_listing()));
    a.update(1, Some(beta_listing()));

    let reversed = |mut l: Listing| {
        l.tools.reverse();
        l.prompts.reverse();
        l.resources.reverse();
        l.templates.reverse();
        l
    };
    let b = catalog(true, &["alpha", "beta"]);
    b.update(1, Some(reversed(beta_listing())));
    b.update(0, Some(reversed(alpha_listing())));

    let (a, b) = (a.snapshot(), b.snapshot());
    assert_eq!(a.tools_json.get(), b.tools_json.get());
    assert_eq!(a.prompts_json.get(), b.prompts_json.get());
    assert_eq!(a.resources_json.get(), b.resources_json.get());
    assert_eq!(a.templates_json.get(), b.templates_json.get());
    assert_eq!(a.view_hashes, b.view_hashes);
    assert_eq!(a.fingerprints, b.fingerprints);
}

#[test]
fn unsafe_upstream_names_are_exposed_safely_and_route_back() {
    let catalog = catalog(true, &["math"]);
    catalog.update(0, Some(tools(&["math.factorial"])));
    let snapshot = catalog.snapshot();
    let exposed = &*snapshot.tools[0].exposed;
    assert!(exposed.starts_with("math__math_factorial_"), "{exposed}");
    let routed = snapshot.tool(exposed).expect("routed by the exposed name");
    assert_eq!(&*routed.route.name, "math.factorial");
}

#[test]
fn items_without_a_name_are_skipped() {
    let catalog = catalog(true, &["alpha"]);
    let listing = Listing {
        tools: vec![json!({ "description": "nameless" }), json!({ "name": 7 }), tool("ok", "")],
        prompts: vec![json!({ "description": "nameless" })],
        resources: vec![json!({ "name": "no uri" })],
        templates: vec![json!({ "name": "no template" })],
    };
    catalog.update(0, Some(listing));
    let snapshot = catalog.snapshot();
    assert_eq!(exposed_names(&snapshot), ["alpha__ok"]);
    assert_eq!(snapshot.prompts_json.get(), "[]");
    assert_eq!(snapshot.resources_json.get(), "[]");
    assert_eq!(snapshot.templates_json.get(), "[]");
}

// ---- versions, change detection -----------------------------------------------------------------

#[test]
fn an_identical_listing_does_not_rebuild_the_snapshot() {
    let catalog = catalog(true, &["alpha"]);
    let mut rx = catalog.subscribe();
    assert_eq!(catalog.snapshot().version, 0);

    let first = catalog.update(0, Some(alpha_listing()));
    let after_first = catalog.snapshot();
    assert_eq!(after_first.version, 1);
    assert!(rx.has_changed().expect("sender alive"));
    rx.borrow_and_update();

    let second = catalog.update(0, Some(alpha_listing()));
    assert_eq!(second, first, "same fingerprint");
    let after_second = catalog.snapshot();
    assert_eq!(after_second.version, 1);
    assert!(Arc::ptr_eq(&after_first, &after_second), "the same snapshot");
    assert!(!rx.has_changed().expect("sender alive"), "no wake-up");

    let mut changed = alpha_listing();
    changed.tools[0]["description"] = json!("now different");
    catalog.update(0, Some(changed));
    assert_eq!(catalog.snapshot().version, 2);
    assert!(rx.has_changed().expect("sender alive"));
}

#[test]
fn a_reordered_listing_changes_nothing_an_agent_sees() {
    let catalog = catalog(true, &["alpha"]);
    catalog.update(0, Some(alpha_listing()));
    let before = catalog.snapshot();
    let mut reordered = alpha_listing();
    reordered.tools.reverse();
    catalog.update(0, Some(reordered));
    let after = catalog.snapshot();
    assert_eq!(before.view_hashes, after.view_hashes);
    assert_eq!(before.tools_json.get(), after.tools_json.get());
    assert_eq!(before.fingerprints, after.fingerprints);
}

#[test]
fn view_hashes_change_only_for_the_kind_that_changed() {
    let catalog = catalog(true, &["alpha"]);
    catalog.update(0, Some(alpha_listing()));
    let base = catalog.snapshot().view_hashes;

    let mut tools_changed = alpha_listing();
    tools_changed.tools.push(tool("new", "a new tool"));
    catalog.update(0, Some(tools_changed));
    let h = catalog.snapshot().view_hashes;
    assert_ne!(h.tools, base.tools);
    assert_eq!(h.resources, base.resources);
    assert_eq!(h.prompts, base.prompts);

    let mut prompts_changed = alpha_listing();
    prompts_changed.prompts[0]["description"] = json!("says goodbye");
    catalog.update(0, Some(prompts_changed));
    let h = catalog.snapshot().view_hashes;
    assert_eq!(h.tools, base.tools);
    assert_eq!(h.resources, base.resources);
    assert_ne!(h.prompts, base.prompts);

    let mut resources_changed = alpha_listing();
    resources_changed.resources.push(json!({ "uri": "file:///more.txt", "name": "more" }));
    catalog.update(0, Some(resources_changed));
    let h = catalog.snapshot().view_hashes;
    assert_eq!(h.tools, base.tools);
    assert_ne!(h.resources, base.resources);
    assert_eq!(h.prompts, base.prompts);

    // Templates are announced with resources (one `resources/list_changed`).
    let mut templates_changed = alpha_listing();
    templates_changed.templates[0]["uriTemplate"] = json!("db://tables/{name}");
    catalog.update(0, Some(templates_changed));
    let h = catalog.snapshot().view_hashes;
    assert_eq!(h.tools, base.tools);
    assert_ne!(h.resources, base.resources);
    assert_eq!(h.prompts, base.prompts);

    catalog.update(0, Some(alpha_listing()));
    assert_eq!(catalog.snapshot().view_hashes, base, "back to the same view");
}

#[test]
fn a_meta_only_change_keeps_the_fingerprint_but_updates_the_listing() {
    let catalog = catalog(true, &["alpha"]);
    let before = catalog.update(0, Some(tools(&["echo"]))).expect("a fingerprint");
    let mut with_meta = tools(&["echo"]);
    with_meta.tools[0]["_meta"] = json!({ "ui": "compact" });
    let after = catalog.update(0, Some(with_meta)).expect("a fingerprint");
    assert_eq!(before, after, "_meta is not part of the contract");
    let snapshot = catalog.snapshot();
    assert_eq!(snapshot.version, 2, "but agents see the new definition");
    assert_eq!(snapshot.tool("alpha__echo").expect("routed").definition["_meta"], json!({ "ui": "compact" }));
}

// ---- up and down --------------------------------------------------------------------------------

#[test]
fn a_down_upstream_loses_its_tools_and_its_names_say_down() {
    let catalog = catalog(true, &["alpha", "beta"]);
    catalog.update(0, Some(alpha_listing()));
    catalog.update(1, Some(beta_listing()));
    assert!(catalog.snapshot().tool("beta__add").is_ok());

    assert_eq!(catalog.update(1, None), None, "no fingerprint when down");
    let snapshot = catalog.snapshot();
    assert_eq!(exposed_names(&snapshot), ["alpha__echo", "alpha__zeta"]);
    assert_eq!(json_names(&snapshot.tools_json, "name"), ["alpha__echo", "alpha__zeta"]);
    assert_eq!(snapshot.tool("beta__add").unwrap_err(), Miss::Down("beta".into()));
    assert_eq!(
        snapshot.tool("beta__never_existed").unwrap_err(),
        Miss::Down("beta".into()),
        "any name in a down namespace"
    );
    assert_eq!(snapshot.tool("alpha__nope").unwrap_err(), Miss::Unknown);
    assert_eq!(snapshot.tool("gamma__x").unwrap_err(), Miss::Unknown);
    assert_eq!(snapshot.tool("no_separator").unwrap_err(), Miss::Unknown);
    assert_eq!(snapshot.prompt("alpha__nope").unwrap_err(), Miss::Unknown);
    assert!(snapshot.prompt("alpha__greet").is_ok());

    // Coming back restores the tools.
    catalog.update(1, Some(beta_listing()));
    assert!(catalog.snapshot().tool("beta__add").is_ok());
}

#[test]
fn before_any_listing_every_namespace_is_down() {
    let catalog = catalog(true, &["alpha", "beta"]);
    let snapshot = catalog.snapshot();
    assert!(snapshot.tools.is_empty());
    assert_eq!(snapshot.tools_json.get(), "[]");
    assert!(snapshot.fingerprints.is_empty());
    assert_eq!(snapshot.tool("alpha__echo").unwrap_err(), Miss::Down("alpha".into()));
    assert_eq!(snapshot.prompt("beta__p").unwrap_err(), Miss::Down("beta".into()));
}

#[test]
fn fingerprints_exist_per_up_namespace() {
    let catalog = catalog(true, &["alpha", "beta", "gamma"]);
    let alpha = catalog.update(0, Some(alpha_listing())).expect("a fingerprint");
    let beta = catalog.update(1, Some(beta_listing())).expect("a fingerprint");
    let snapshot = catalog.snapshot();
    let keys: Vec<&str> = snapshot.fingerprints.keys().map(|k| &**k).collect();
    assert_eq!(keys, ["alpha", "beta"], "gamma is down");
    assert_eq!(snapshot.fingerprints["alpha"], alpha);
    assert_eq!(snapshot.fingerprints["beta"], beta);
    assert_ne!(alpha, beta);
    assert_eq!(alpha.len(), 64, "hex SHA-256: {alpha}");

    // Each tool carries its own contract fingerprint.
    let echo = snapshot.tool("alpha__echo").expect("routed");
    assert_eq!(&*echo.fingerprint, fingerprint::tool_fingerprint(&tool("echo", "echoes")));

    // An up upstream with no tools still has a (stable) fingerprint.
    let empty = catalog.update(2, Some(Listing::default())).expect("a fingerprint");
    assert_eq!(catalog.snapshot().fingerprints["gamma"], empty);

    catalog.update(1, None);
    let keys: Vec<String> = catalog.snapshot().fingerprints.keys().map(|k| k.to_string()).collect();
    assert_eq!(keys, ["alpha", "gamma"]);
}

// ---- unprefixed mode ----------------------------------------------------------------------------

#[test]
fn unprefixed_collisions_keep_the_first_configured_upstream_and_warn() {
    let catalog = catalog(false, &["alpha", "beta"]);
    // beta's listing arrives first; configuration order still decides.
    catalog.update(1, Some(tools(&["search", "add"])));
    catalog.update(0, Some(tools(&["search"])));
    let snapshot = catalog.snapshot();

    assert_eq!(exposed_names(&snapshot), ["add", "search"]);
    let search = snapshot.tool("search").expect("routed");
    assert_eq!(search.route.upstream, 0);
    assert_eq!(&*search.route.namespace, "alpha");
    assert_eq!(snapshot.tool("add").expect("routed").route.upstream, 1);

    assert_eq!(snapshot.warnings.len(), 1, "{:?}", snapshot.warnings);
    let warning = &snapshot.warnings[0];
    assert!(warning.contains("\"search\""), "{warning}");
    assert!(warning.contains("\"alpha\""), "{warning}");
    assert!(warning.contains("\"beta\""), "{warning}");

    // Once alpha is down, beta's tool is the only one and the warning goes away.
    catalog.update(0, None);
    let snapshot = catalog.snapshot();
    assert_eq!(snapshot.tool("search").expect("routed").route.upstream, 1);
    assert!(snapshot.warnings.is_empty());
}

#[test]
fn prefixed_mode_exposes_both_tools_without_warnings() {
    let catalog = catalog(true, &["alpha", "beta"]);
    catalog.update(0, Some(tools(&["search"])));
    catalog.update(1, Some(tools(&["search"])));
    let snapshot = catalog.snapshot();
    assert_eq!(exposed_names(&snapshot), ["alpha__search", "beta__search"]);
    assert!(snapshot.warnings.is_empty());
}

#[test]
fn unprefixed_misses_are_unknown_unless_the_only_upstream_is_down() {
    let catalog = catalog(false, &["alpha"]);
    assert_eq!(catalog.snapshot().tool("anything").unwrap_err(), Miss::Down("alpha".into()));
    catalog.update(0, Some(tools(&["echo"])));
    assert_eq!(catalog.snapshot().tool("anything").unwrap_err(), Miss::Unknown);
}

// ---- resources ----------------------------------------------------------------------------------

#[test]
fn prefixed_resources_route_by_namespace() {
    let catalog = catalog(true, &["alpha", "beta"]);
    catalog.update(0, Some(alpha_listing()));
    let snapshot = catalog.snapshot();

    let listed = snapshot.resource("alpha+file:///notes.txt").expect("routed");
    assert_eq!(listed.upstream, 0);
    assert_eq!(&*listed.name, "file:///notes.txt");

    // Unlisted URIs (e.g. from a template) still route by their namespace.
    let templated = snapshot.resource("alpha+db://rows/42").expect("routed");
    assert_eq!(templated.upstream, 0);
    assert_eq!(&*templated.namespace, "alpha");
    assert_eq!(&*templated.name, "db://rows/42");

    assert_eq!(snapshot.resource("beta+file:///x").unwrap_err(), Miss::Down("beta".into()));
    assert_eq!(snapshot.resource("gamma+file:///x").unwrap_err(), Miss::Unknown);
    assert_eq!(snapshot.resource("file:///notes.txt").unwrap_err(), Miss::Unknown);

    assert_eq!(snapshot.expose_uri("alpha", "file:///notes.txt"), "alpha+file:///notes.txt");
}

#[test]
fn unprefixed_resources_route_by_exact_uri_then_longest_template_prefix() {
    let catalog = catalog(false, &["alpha", "beta"]);
    catalog.update(
        0,
        Some(Listing {
            resources: vec![json!({ "uri": "file:///notes.txt", "name": "notes" })],
            templates: vec![json!({ "uriTemplate": "db://{table}", "name": "table" })],
            ..Listing::default()
        }),
    );
    catalog.update(
        1,
        Some(Listing {
            templates: vec![json!({ "uriTemplate": "db://rows/{id}", "name": "row" })],
            ..Listing::default()
        }),
    );
    let snapshot = catalog.snapshot();

    let exact = snapshot.resource("file:///notes.txt").expect("routed");
    assert_eq!((exact.upstream, &*exact.name), (0, "file:///notes.txt"));

    let row = snapshot.resource("db://rows/42").expect("routed");
    assert_eq!(row.upstream, 1, "the longer template prefix wins");
    assert_eq!(&*row.name, "db://rows/42");

    let table = snapshot.resource("db://users").expect("routed");
    assert_eq!(table.upstream, 0);

    assert_eq!(snapshot.resource("https://elsewhere/").unwrap_err(), Miss::Unknown);
    assert_eq!(snapshot.expose_uri("alpha", "file:///a"), "file:///a");
    assert_eq!(json_names(&snapshot.templates_json, "uriTemplate"), ["db://rows/{id}", "db://{table}"]);
}

#[test]
fn with_a_single_unprefixed_upstream_any_uri_goes_to_it() {
    let catalog = catalog(false, &["alpha"]);
    catalog.update(0, Some(tools(&["echo"])));
    let route = catalog.snapshot().resource("anything://at/all").expect("routed");
    assert_eq!(route.upstream, 0);
    assert_eq!(&*route.name, "anything://at/all");

    catalog.update(0, None);
    assert_eq!(catalog.snapshot().resource("anything://at/all").unwrap_err(), Miss::Down("alpha".into()));
}
