use super::*;
use crate::catalog::Listing;
use crate::config::DEFAULT_FLOOR;

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object"}})
}

/// A gate over one upstream `ns` listing `tools` (in the order given), pinning `pins`.
fn gate_with(tools: Vec<Value>, pins: &[&str]) -> (Gate, Catalog) {
    let namer = Namer::new("__", true);
    let catalog = Catalog::new(namer.clone(), vec!["ns".into()]);
    catalog.update(0, Some(Listing { tools, ..Listing::default() }));
    let settings = GatingConfig {
        enabled: true,
        tail_k: 2,
        session_tail_max: 8,
        pin: Vec::new(),
        floor: DEFAULT_FLOOR,
        max_conversations: 16,
    };
    let pins = HashMap::from([("ns".to_string(), pins.iter().map(|p| p.to_string()).collect())]);
    (Gate::with_settings(settings, true, pins, namer, Arc::new(Metrics::new())), catalog)
}

fn catalog_tools() -> Vec<Value> {
    vec![
        tool("send_email", "Send an email message."),
        tool("get_weather", "Weather forecast for a city."),
        tool("convert_currency", "Convert money between currencies."),
        tool("book_hotel", "Book a hotel room."),
    ]
}

fn names(view: &View, indices: &[usize]) -> Vec<String> {
    indices.iter().map(|&i| view.entries[i].name.to_string()).collect()
}

#[test]
fn the_core_is_canonical_whatever_order_upstreams_list_tools_in() {
    let (gate, catalog) = gate_with(catalog_tools(), &["send_email", "book_hotel"]);
    let view = gate.view(&catalog.snapshot());
    assert_eq!(
        names(&view, &view.core),
        ["gateway__call_tool", "gateway__search_tools", "ns__book_hotel", "ns__send_email"]
    );

    let mut reversed = catalog_tools();
    reversed.reverse();
    let (gate2, catalog2) = gate_with(reversed, &["book_hotel", "send_email"]);
    let view2 = gate2.view(&catalog2.snapshot());
    assert_eq!(view.core_json, view2.core_json);
    assert_eq!(view.core_hash, view2.core_hash);
    assert_eq!(view.core_hash, hex::encode(Sha256::digest(&view.core_json)));
}

#[test]
fn the_tail_is_ranked_above_the_floor_and_never_repeats_the_core() {
    let (gate, catalog) = gate_with(catalog_tools(), &["get_weather"]);
    let view = gate.view(&catalog.snapshot());
    let ranked = view.rank("weather forecast and currency", 2, DEFAULT_FLOOR);
    assert_eq!(names(&view, &ranked.iter().map(|(i, _)| *i).collect::<Vec<_>>()), ["ns__convert_currency"]);
    assert!(view.rank("zebra quantum", 2, DEFAULT_FLOOR).is_empty(), "nothing fits: no padding");
    assert_eq!(view.rank("email hotel money", 2, 0.0).len(), 2, "at most k");
}

#[test]
fn a_manifest_renders_as_core_then_tail_and_accounts_for_every_token() {
    let (gate, catalog) = gate_with(catalog_tools(), &[]);
    let view = gate.view(&catalog.snapshot());
    let tail = canonical_order(
        view.rank("send an email and book a hotel", 2, DEFAULT_FLOOR).into_iter().map(|(i, _)| i).collect(),
    );
    let manifest = view.manifest(tail.clone());
    let rendered: Vec<Value> = serde_json::from_slice(&view.render(&manifest.tail).concat()).unwrap();
    let rendered: Vec<&str> = rendered.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(rendered, ["gateway__call_tool", "gateway__search_tools", "ns__book_hotel", "ns__send_email"]);
    assert_eq!(manifest.exposed_tokens + manifest.withheld_tokens, view.all_tokens);
    assert!(manifest.withheld_tokens > 0);
    let full: Vec<Value> = serde_json::from_slice(&view.full_json).unwrap();
    assert_eq!(full.len(), view.entries.len());
}

#[test]
fn a_view_is_built_once_per_snapshot_and_a_core_change_is_counted() {
    let (gate, catalog) = gate_with(catalog_tools(), &["get_weather"]);
    let first = gate.view(&catalog.snapshot());
    assert!(Arc::ptr_eq(&first, &gate.view(&catalog.snapshot())), "cached per version");
    // A tail tool changes: new snapshot, same core.
    let mut tools = catalog_tools();
    tools[0] = tool("send_email", "Send an email message, with attachments.");
    catalog.update(0, Some(Listing { tools: tools.clone(), ..Listing::default() }));
    let second = gate.view(&catalog.snapshot());
    assert_eq!(second.core_hash, first.core_hash);
    // The pinned tool changes: the core moves once.
    tools[1] = tool("get_weather", "Weather forecast for a city, hourly.");
    catalog.update(0, Some(Listing { tools, ..Listing::default() }));
    let third = gate.view(&catalog.snapshot());
    assert_ne!(third.core_hash, first.core_hash);
    assert_eq!(gate.metrics.json()["core_hash_changes_total"], 1);
}
