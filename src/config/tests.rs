// A failed unwrap is a test failure with a backtrace; that is all a test needs.
#![allow(clippy::unwrap_used)]

use super::*;

// ---- helpers ------------------------------------------------------------------------------------

fn no_env() -> Env {
    Env::from_pairs([])
}

fn parse_with(text: &str, env: &Env) -> Config {
    Config::parse(text, env).unwrap_or_else(|e| panic!("expected a valid config:\n{e}"))
}

fn parse(text: &str) -> Config {
    parse_with(text, &no_env())
}

fn errors_with(text: &str, env: &Env) -> Vec<ConfigError> {
    match Config::parse(text, env) {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(e) => e.errors,
    }
}

fn errors(text: &str) -> Vec<ConfigError> {
    errors_with(text, &no_env())
}

/// The only error `text` produces.
fn error(text: &str) -> ConfigError {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "expected exactly one error: {errors:#?}");
    errors.into_iter().next().expect("one error")
}

/// The 1-based line of the first line containing `needle`, counted independently of the code
/// under test.
fn line_of_text(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in the text")) + 1
}

/// A valid base: loopback, no inbound auth, one upstream. Tests append to or edit it.
const LOCAL: &str = r#"
[gateway]
auth_disabled = true
"#;

fn with_upstream(extra: &str) -> String {
    format!("{LOCAL}\n[[upstreams]]\nnamespace = \"alpha\"\nurl = \"http://127.0.0.1:9001/mcp\"\n{extra}\n")
}

fn only_upstream(config: &Config) -> &UpstreamConfig {
    assert_eq!(config.upstreams.len(), 1, "{config:#?}");
    &config.upstreams[0]
}

// ---- defaults -----------------------------------------------------------------------------------

#[test]
fn defaults_fill_every_unset_value() {
    let config = parse(&with_upstream(""));
    let g = &config.gateway;
    assert_eq!(g.host, "127.0.0.1");
    assert_eq!(g.port, 8090);
    assert_eq!(g.path, "/mcp");
    assert_eq!(g.auth, InboundAuth::Disabled { allow_remote: false });
    assert_eq!(g.separator, "__");
    assert_eq!(g.prefix_mode, PrefixMode::Always);
    assert!(g.allowed_origins.is_empty());
    assert!(g.allowed_hosts.is_empty());
    assert_eq!(g.manifest_ttl, Duration::from_secs(30));
    assert_eq!(g.max_body_bytes, 4 * 1024 * 1024);
    assert_eq!(g.max_response_bytes, 16 * 1024 * 1024);
    assert_eq!(g.session_idle_timeout, Duration::from_secs(30 * 60));
    assert_eq!(g.max_sessions, 10_000);
    assert_eq!(g.cold_start_wait, Duration::from_secs(10));
    assert_eq!(g.instructions, None);
    assert_eq!(g.log_format, LogFormat::Text);

    let u = only_upstream(&config);
    assert_eq!(u.namespace, "alpha");
    assert_eq!(u.url().unwrap().as_str(), "http://127.0.0.1:9001/mcp");
    assert_eq!(u.auth, UpstreamAuth::None);
    assert_eq!(u.origin, None);
    assert!(u.headers.is_empty());
    assert!(u.tls_verify);
    assert_eq!(u.ca_bundle, None);
    assert_eq!(u.timeout, Duration::from_secs(30));
    assert_eq!(u.ping_interval, Duration::from_secs(45));
    assert_eq!(u.probe_interval, Duration::from_secs(12 * 60));
    assert!(u.pin.is_empty());

    assert!(config.rag.enabled);
    assert_eq!(config.rag.persist_dir, None);
    assert!(config.prefixed());
}

#[test]
fn no_upstreams_is_a_valid_if_empty_gateway() {
    let config = parse(LOCAL);
    assert!(config.upstreams.is_empty());
}

#[test]
fn explicit_values_replace_the_defaults() {
    let text = r#"
[gateway]
host = "localhost"
port = 9999
path = "/gateway/mcp"
auth_disabled = true
allowed_origins = ["https://App.Example.com/"]
allowed_hosts = ["Gateway.Internal"]
max_body_bytes = 1024
max_sessions = 5
instructions = "Use the search tool first."
log_format = "json"

[ranking]
enabled = false
"#;
    let config = parse(text);
    let g = &config.gateway;
    assert_eq!(g.host, "localhost");
    assert_eq!(g.port, 9999);
    assert_eq!(g.path, "/gateway/mcp");
    // Lower-cased, trailing slash dropped, so comparisons against request headers are exact.
    assert_eq!(g.allowed_origins, ["https://app.example.com"]);
    assert_eq!(g.allowed_hosts, ["gateway.internal"]);
    assert_eq!(g.max_body_bytes, 1024);
    assert_eq!(g.max_sessions, 5);
    assert_eq!(g.instructions.as_deref(), Some("Use the search tool first."));
    assert_eq!(g.log_format, LogFormat::Json);
    // `[ranking]` is accepted as the newer name of `[rag]`.
    assert!(!config.rag.enabled);
}

// ---- unknown keys and TOML errors ---------------------------------------------------------------

#[test]
fn unknown_top_level_key_is_named_with_its_line() {
    let text = "# comment\n\nbogus = 1\n[gateway]\nauth_disabled = true\n";
    let e = error(text);
    assert_eq!(e.path, "bogus", "{e}");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("unknown field `bogus`"), "{e}");
}

#[test]
fn unknown_gateway_key_is_named_with_its_line() {
    let text = "[gateway]\nauth_disabled = true\nport = 8090\nbogus = \"x\"\n";
    let e = error(text);
    assert_eq!(e.path, "gateway.bogus", "{e}");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.message.contains("unknown field `bogus`"), "{e}");
}

#[test]
fn unknown_upstream_key_is_named_with_its_index_and_line() {
    let text = format!(
        "{}\n[[upstreams]]\nnamespace = \"beta\"\nurl = \"http://127.0.0.1:9002/mcp\"\nbogus = true\n",
        with_upstream("")
    );
    let e = error(&text);
    assert_eq!(e.path, "upstreams[1].bogus", "{e}");
    assert_eq!(e.line, Some(line_of_text(&text, "bogus")), "{e}");
}

#[test]
fn misspelled_known_key_is_refused_not_ignored() {
    // `bearer_token` instead of `bearer_token_env` must not silently run without auth.
    let e = error("[gateway]\nbearer_token = \"PANDA_GATEWAY_TOKEN\"\n");
    assert_eq!(e.path, "gateway.bearer_token", "{e}");
    assert_eq!(e.line, Some(2));
}

#[test]
fn wrong_value_type_names_the_key() {
    let text = "[gateway]\nauth_disabled = true\nport = \"eighty\"\n";
    let e = error(text);
    assert_eq!(e.path, "gateway.port", "{e}");
    assert_eq!(e.line, Some(3), "{e}");
}

#[test]
fn wrong_types_on_spanned_values_name_the_key_only() {
    for (entry, path) in [
        ("origin = 5", "upstreams[0].origin"),
        ("token_file = 5", "upstreams[0].token_file"),
        ("timeout = true", "upstreams[0].timeout"),
        ("headers = { X-A = 1 }", "upstreams[0].headers.X-A"),
    ] {
        let text = with_upstream(entry);
        let e = error(&text);
        assert_eq!(e.path, path, "{entry}: {e}");
        assert_eq!(e.line, Some(line_of_text(&text, entry)), "{entry}");
    }
    let e = error("[gateway]\nauth_disabled = true\nhost = 8080\n");
    assert_eq!(e.path, "gateway.host", "{e}");
    assert_eq!(e.line, Some(3));
}

#[test]
fn toml_syntax_errors_carry_a_line() {
    let e = error("[gateway]\nauth_disabled = true\nport = \n");
    assert_eq!(e.path, "(file)", "{e}");
    assert_eq!(e.line, Some(3), "{e}");
}

// ---- upstream URLs and namespaces ---------------------------------------------------------------

#[test]
fn a_url_without_a_scheme_says_what_was_expected() {
    let text = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"alpha\"\nurl = \"localhost:8000\"\n");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].url");
    assert_eq!(e.line, Some(line_of_text(&text, "localhost:8000")));
    assert!(e.message.contains("expected an absolute http(s) URL, got \"localhost:8000\""), "{e}");
    // The Display form is what operators read.
    assert_eq!(
        e.to_string(),
        format!("line {}: upstreams[0].url: expected an absolute http(s) URL, got \"localhost:8000\"", e.line.unwrap())
    );
}

#[test]
fn non_http_and_relative_urls_are_refused() {
    for url in ["ftp://example.com/mcp", "/mcp", "file:///tmp/sock", "http://"] {
        let text = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"alpha\"\nurl = \"{url}\"\n");
        let e = error(&text);
        assert_eq!(e.path, "upstreams[0].url", "{url}: {e}");
        assert!(e.message.contains("expected an absolute http(s) URL"), "{e}");
    }
}

#[test]
fn a_missing_url_is_required() {
    let text = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"alpha\"\n");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].url");
    assert_eq!(e.line, Some(line_of_text(&text, "namespace")));
    assert!(e.message.starts_with("required"), "{e}");
}

#[test]
fn duplicate_namespaces_point_at_the_second_and_name_the_first() {
    let text =
        format!("{}\n[[upstreams]]\nnamespace = \"alpha\"\nurl = \"http://127.0.0.1:9002/mcp\"\n", with_upstream(""));
    let e = error(&text);
    assert_eq!(e.path, "upstreams[1].namespace");
    let second = text.rfind("namespace = \"alpha\"").expect("second namespace");
    assert_eq!(e.line, Some(text[..second].lines().count() + 1));
    assert!(e.message.contains("duplicate namespace \"alpha\""), "{e}");
    assert!(e.message.contains("upstreams[0]"), "{e}");
}

#[test]
fn a_namespace_may_not_contain_the_separator() {
    let with_default = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"a__b\"\nurl = \"http://h/mcp\"\n");
    let e = error(&with_default);
    assert_eq!(e.path, "upstreams[0].namespace");
    assert_eq!(e.line, Some(line_of_text(&with_default, "a__b")));
    assert!(e.message.contains("contains the separator \"__\""), "{e}");

    let dashed = "[gateway]\nauth_disabled = true\nseparator = \"-\"\n\n[[upstreams]]\nnamespace = \"a-b\"\nurl = \"http://h/mcp\"\n";
    let e = error(dashed);
    assert_eq!(e.path, "upstreams[0].namespace");
    assert!(e.message.contains("contains the separator \"-\""), "{e}");

    // With "." as separator a dotted namespace is refused (dots are never namespace characters),
    // while "a__b" becomes fine.
    let dotted = "[gateway]\nauth_disabled = true\nseparator = \".\"\n\n[[upstreams]]\nnamespace = \"a.b\"\nurl = \"http://h/mcp\"\n";
    let e = error(dotted);
    assert_eq!(e.path, "upstreams[0].namespace");
    assert_eq!(e.line, Some(6));
    assert!(e.message.contains("\"a.b\""), "{e}");

    let underscored = dotted.replace("a.b", "a__b");
    assert_eq!(only_upstream(&parse(&underscored)).namespace, "a__b");
}

#[test]
fn namespaces_must_be_short_and_plain() {
    let too_long = "n".repeat(49);
    for ns in ["", "has space", "a+b", too_long.as_str()] {
        let text = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"{ns}\"\nurl = \"http://h/mcp\"\n");
        let e = error(&text);
        assert_eq!(e.path, "upstreams[0].namespace", "{ns:?}: {e}");
    }
    let longest = "n".repeat(48);
    let text = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"{longest}\"\nurl = \"http://h/mcp\"\n");
    assert_eq!(only_upstream(&parse(&text)).namespace, longest);
}

#[test]
fn the_gateway_namespace_is_reserved() {
    let text = format!("{LOCAL}\n[[upstreams]]\nnamespace = \"gateway\"\nurl = \"http://h/mcp\"\n");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].namespace");
    assert!(e.message.contains("reserved"), "{e}");
}

#[test]
fn a_bad_separator_is_refused() {
    let e = error("[gateway]\nauth_disabled = true\nseparator = \"::\"\n");
    assert_eq!(e.path, "gateway.separator");
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("\"::\""), "{e}");
}

#[test]
fn a_relative_gateway_path_is_refused() {
    let e = error("[gateway]\nauth_disabled = true\npath = \"mcp\"\n");
    assert_eq!(e.path, "gateway.path");
    assert_eq!(e.line, Some(3));
}

// ---- secrets and auth ---------------------------------------------------------------------------

#[test]
fn gateway_bearer_token_is_read_from_the_named_variable() {
    let text = "[gateway]\nbearer_token_env = \"GW_TOKEN\"\n";
    let config = parse_with(text, &Env::from_pairs([("GW_TOKEN", "  tok-123 \n")]));
    let InboundAuth::Bearer { env, token } = &config.gateway.auth else { panic!("{:?}", config.gateway.auth) };
    assert_eq!(env, "GW_TOKEN");
    assert_eq!(token.expose(), "tok-123", "trimmed");
}

#[test]
fn a_missing_gateway_token_variable_is_named() {
    let text = "[gateway]\nport = 8090\nbearer_token_env = \"GW_TOKEN_MISSING\"\n";
    let errors = errors_with(text, &Env::from_pairs([("OTHER", "x")]));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = &errors[0];
    assert_eq!(e.path, "gateway.bearer_token_env");
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("\"GW_TOKEN_MISSING\""), "{e}");
    assert!(e.message.contains("not set"), "{e}");
}

#[test]
fn an_empty_token_variable_is_an_error_too() {
    let text = "[gateway]\nbearer_token_env = \"GW_TOKEN\"\n";
    let errors = errors_with(text, &Env::from_pairs([("GW_TOKEN", "   ")]));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].path, "gateway.bearer_token_env");
    assert!(errors[0].message.contains("is empty"), "{}", errors[0]);
}

#[test]
fn a_missing_upstream_token_variable_is_named() {
    let text = with_upstream("bearer_token_env = \"ALPHA_TOKEN\"");
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = &errors[0];
    assert_eq!(e.path, "upstreams[0].bearer_token_env");
    assert_eq!(e.line, Some(line_of_text(&text, "ALPHA_TOKEN")));
    assert!(e.message.contains("\"ALPHA_TOKEN\""), "{e}");

    let config = parse_with(&text, &Env::from_pairs([("ALPHA_TOKEN", "a-token")]));
    assert_eq!(
        only_upstream(&config).auth,
        UpstreamAuth::Bearer { env: "ALPHA_TOKEN".into(), token: Secret::new("a-token".into()) }
    );
}

#[test]
fn an_upstream_takes_a_token_variable_or_a_token_file_not_both() {
    let text = with_upstream("bearer_token_env = \"ALPHA_TOKEN\"\ntoken_file = \"/run/alpha.token\"");
    let errors = errors_with(&text, &Env::from_pairs([("ALPHA_TOKEN", "x")]));
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = &errors[0];
    assert_eq!(e.path, "upstreams[0].token_file");
    assert_eq!(e.line, Some(line_of_text(&text, "token_file")));
    assert!(e.message.contains("not both"), "{e}");
}

#[test]
fn token_file_expands_home_from_the_injected_env() {
    let text = with_upstream("token_file = \"~/x\"");
    let config = parse_with(&text, &Env::from_pairs([("HOME", "/home/tester")]));
    assert_eq!(only_upstream(&config).auth, UpstreamAuth::TokenFile(PathBuf::from("/home/tester/x")));

    // Without HOME the path is kept as written; only a leading "~/" is expanded.
    let config = parse(&text);
    assert_eq!(only_upstream(&config).auth, UpstreamAuth::TokenFile(PathBuf::from("~/x")));
    let text = with_upstream("token_file = \"/etc/~/x\"");
    let config = parse_with(&text, &Env::from_pairs([("HOME", "/home/tester")]));
    assert_eq!(only_upstream(&config).auth, UpstreamAuth::TokenFile(PathBuf::from("/etc/~/x")));
}

#[test]
fn a_missing_ca_bundle_variable_is_named() {
    let text = with_upstream("ca_bundle_env = \"MY_CA\"");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].ca_bundle_env");
    assert!(e.message.contains("\"MY_CA\""), "{e}");
}

#[test]
fn no_inbound_auth_at_all_is_an_error() {
    for text in ["[gateway]\nport = 8090\n", ""] {
        let e = error(text);
        assert_eq!(e.path, "gateway", "{text:?}");
        assert!(e.message.contains("bearer_token_env"), "{e}");
        assert!(e.message.contains("auth_disabled"), "{e}");
    }
}

#[test]
fn disabled_auth_refuses_a_non_loopback_bind_unless_explicitly_allowed() {
    let text = "[gateway]\nhost = \"0.0.0.0\"\nauth_disabled = true\n";
    let e = error(text);
    assert_eq!(e.path, "gateway.auth_disabled");
    assert!(e.message.contains("\"0.0.0.0\""), "{e}");
    assert!(e.message.contains("allow_unauthenticated_remote"), "{e}");

    let allowed = format!("{text}allow_unauthenticated_remote = true\n");
    let config = parse(&allowed);
    assert_eq!(config.gateway.auth, InboundAuth::Disabled { allow_remote: true });

    for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"] {
        let text = format!("[gateway]\nhost = \"{host}\"\nauth_disabled = true\n");
        assert_eq!(parse(&text).gateway.auth, InboundAuth::Disabled { allow_remote: false }, "{host}");
    }
}

#[test]
fn auth_disabled_wins_over_a_token_variable() {
    // Explicitly disabled auth does not require the variable to exist.
    let text = "[gateway]\nauth_disabled = true\nbearer_token_env = \"UNSET\"\n";
    assert_eq!(parse(text).gateway.auth, InboundAuth::Disabled { allow_remote: false });
}

#[test]
fn secrets_never_appear_in_debug_output_or_the_plan() {
    let text = with_upstream("bearer_token_env = \"ALPHA_TOKEN\"")
        .replace("auth_disabled = true", "bearer_token_env = \"GW_TOKEN\"");
    let env = Env::from_pairs([("GW_TOKEN", "gw-SECRET-8f3a9c"), ("ALPHA_TOKEN", "alpha-SECRET-77d1e0")]);
    let config = parse_with(&text, &env);
    for rendered in [format!("{config:?}"), format!("{config:#?}"), plan(&config, Path::new("gatehouse.toml"))] {
        assert!(!rendered.contains("SECRET"), "{rendered}");
        // The variable names are fine to show: they tell the operator where the secret lives.
        assert!(rendered.contains("GW_TOKEN"), "{rendered}");
        assert!(rendered.contains("ALPHA_TOKEN"), "{rendered}");
    }
    // …while the values are there for the code that needs them.
    let InboundAuth::Bearer { token, .. } = &config.gateway.auth else { panic!("not bearer") };
    assert_eq!(token.expose(), "gw-SECRET-8f3a9c");
}

#[test]
fn url_credentials_are_kept_but_never_printed() {
    let text = format!(
        "{LOCAL}\n[[upstreams]]\nnamespace = \"alpha\"\nurl = \"https://user:hunter2@example.com/mcp\"\n\
         [upstreams.headers]\nX-Api-Key = \"key-hunter2\"\n"
    );
    let config = parse(&text);
    let plan = plan(&config, Path::new("g.toml"));
    assert!(!plan.contains("hunter2"), "{plan}");
    assert!(plan.contains("https://example.com/mcp"), "{plan}");
    // A URL password is a credential (it becomes Basic auth) and a static header is often an API
    // key: Debug must not print either.
    let debug = format!("{config:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("example.com"), "{debug}");
    assert!(debug.contains("x-api-key"), "header names stay visible: {debug}");
    // The request still goes out with it.
    assert_eq!(only_upstream(&config).url().unwrap().password(), Some("hunter2"));
}

// ---- headers ------------------------------------------------------------------------------------

#[test]
fn static_headers_are_parsed_and_gateway_owned_ones_refused() {
    let text = with_upstream("[upstreams.headers]\nX-Tenant = \"atlas\"");
    let config = parse(&text);
    let headers = &only_upstream(&config).headers;
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].0.as_str(), "x-tenant");
    assert_eq!(headers[0].1, "atlas");

    let text = with_upstream("[upstreams.headers]\nMcp-Session-Id = \"fixed\"");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].headers.Mcp-Session-Id");
    assert_eq!(e.line, Some(line_of_text(&text, "fixed")));
    assert!(e.message.contains("set by the gateway"), "{e}");

    let text = with_upstream("[upstreams.headers]\n\"bad header\" = \"v\"");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].headers.bad header");
    assert!(e.message.contains("header name"), "{e}");
}

// ---- durations ----------------------------------------------------------------------------------

#[test]
fn durations_accept_units_and_bare_seconds() {
    let cases: [(&str, Duration); 8] = [
        ("\"30s\"", Duration::from_secs(30)),
        ("\"12m\"", Duration::from_secs(12 * 60)),
        ("\"500ms\"", Duration::from_millis(500)),
        ("45", Duration::from_secs(45)),
        ("\"1h\"", Duration::from_secs(3600)),
        ("\"1d\"", Duration::from_secs(86_400)),
        ("\"1.5s\"", Duration::from_millis(1500)),
        ("\" 2 m \"", Duration::from_secs(120)),
    ];
    for (value, expected) in cases {
        let config = parse(&with_upstream(&format!("timeout = {value}")));
        assert_eq!(only_upstream(&config).timeout, expected, "{value}");
    }
    let text = "[gateway]\nauth_disabled = true\nmanifest_ttl = \"5m\"\nsession_idle_timeout = 90\ncold_start_wait = \"250ms\"\n";
    let g = parse(text).gateway;
    assert_eq!(g.manifest_ttl, Duration::from_secs(300));
    assert_eq!(g.session_idle_timeout, Duration::from_secs(90));
    assert_eq!(g.cold_start_wait, Duration::from_millis(250));
}

#[test]
fn bad_durations_name_the_key_and_show_the_expected_form() {
    for value in ["soon", "5 parsecs", "-5s", "", "1e3s", "99999999999999999999999h"] {
        let text = with_upstream(&format!("ping_interval = \"{value}\""));
        let e = error(&text);
        assert_eq!(e.path, "upstreams[0].ping_interval", "{value:?}");
        assert_eq!(e.line, Some(line_of_text(&text, "ping_interval")), "{value:?}");
        assert!(e.message.starts_with("expected a duration such as"), "{value:?}: {e}");
    }
}

#[test]
fn durations_of_the_wrong_type_say_what_is_expected() {
    for value in ["true", "-5", "1.5", "[1]"] {
        let text = with_upstream(&format!("timeout = {value}"));
        let e = error(&text);
        assert_eq!(e.path, "upstreams[0].timeout", "{value}: {e}");
        assert_eq!(e.line, Some(line_of_text(&text, "timeout")), "{value}");
        assert!(e.message.contains("expected a duration such as \"500ms\""), "{value}: {e}");
    }
}

#[test]
fn zero_durations_are_refused() {
    for value in ["0", "\"0s\"", "\"0ms\""] {
        let text = with_upstream(&format!("probe_interval = {value}"));
        let e = error(&text);
        assert_eq!(e.path, "upstreams[0].probe_interval", "{value}");
        assert_eq!(e.message, "must be greater than zero");
    }
    let e = error("[gateway]\nauth_disabled = true\nmanifest_ttl = 0\n");
    assert_eq!(e.path, "gateway.manifest_ttl");
    assert_eq!(e.line, Some(3));
}

// ---- prefix mode --------------------------------------------------------------------------------

fn two_upstreams(prefix_mode: &str) -> String {
    format!(
        "[gateway]\nauth_disabled = true\nprefix_mode = \"{prefix_mode}\"\n\n\
         [[upstreams]]\nnamespace = \"alpha\"\nurl = \"http://h/a\"\n\n\
         [[upstreams]]\nnamespace = \"beta\"\nurl = \"http://h/b\"\n"
    )
}

#[test]
fn prefix_mode_values_decide_whether_names_are_prefixed() {
    let always = parse(&two_upstreams("always"));
    assert_eq!(always.gateway.prefix_mode, PrefixMode::Always);
    assert!(always.prefixed());

    let never = parse(&two_upstreams("never"));
    assert_eq!(never.gateway.prefix_mode, PrefixMode::Never);
    assert!(!never.prefixed());

    let conditional = parse(&two_upstreams("conditional"));
    assert_eq!(conditional.gateway.prefix_mode, PrefixMode::Conditional);
    assert!(conditional.prefixed(), "two upstreams");
    let single = parse(
        &with_upstream("").replace("auth_disabled = true", "auth_disabled = true\nprefix_mode = \"conditional\""),
    );
    assert!(!single.prefixed(), "one upstream");
}

#[test]
fn a_bad_prefix_mode_lists_the_choices() {
    let text = two_upstreams("sometimes");
    let e = error(&text);
    assert_eq!(e.path, "gateway.prefix_mode");
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("expected \"always\", \"conditional\" or \"never\", got \"sometimes\""), "{e}");
}

// ---- many problems at once ----------------------------------------------------------------------

#[test]
fn every_problem_in_a_file_is_reported() {
    let text = r#"
[gateway]
bearer_token_env = "GW_TOKEN"
manifest_ttl = "soon"

[[upstreams]]
namespace = "alpha"
url = "localhost:8000"

[[upstreams]]
namespace = "alpha"
url = "http://127.0.0.1:9002/mcp"
timeout = 0
bearer_token_env = "ALPHA_TOKEN"
"#;
    let errors = errors(text);
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert!(errors.len() >= 3, "{errors:#?}");
    for expected in [
        "gateway.bearer_token_env",
        "gateway.manifest_ttl",
        "upstreams[0].url",
        "upstreams[1].namespace",
        "upstreams[1].timeout",
        "upstreams[1].bearer_token_env",
    ] {
        assert!(paths.contains(&expected), "{expected} missing from {paths:?}");
    }
    for e in &errors {
        assert!(e.line.is_some(), "{e}");
    }

    let rendered = Config::parse(text, &no_env()).unwrap_err().to_string();
    assert!(rendered.starts_with(&format!("invalid configuration ({} problem(s)):", errors.len())), "{rendered}");
    assert_eq!(rendered.lines().count(), errors.len() + 1, "{rendered}");
}

#[test]
fn load_names_the_file_in_its_errors() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let missing = dir.path().join("missing.toml");
    let e = Config::load(&missing, &no_env()).unwrap_err();
    assert_eq!(e.file.as_deref(), Some(missing.as_path()));
    assert_eq!(e.errors[0].path, "(file)");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[gateway]\nport = 1\n").expect("write");
    let e = Config::load(&bad, &no_env()).unwrap_err();
    assert!(e.to_string().starts_with(&format!("invalid configuration {} (1 problem(s)):", bad.display())));
}

// ---- the routing-seed examples load unchanged ---------------------------------------------------

fn seed_env() -> Env {
    Env::from_pairs([
        ("PANDA_GATEWAY_TOKEN", "inbound-token"),
        ("BAMBOO_TOKEN", "bamboo-token"),
        ("SSL_CERT_FILE", "/etc/pki/tls/certs/ca-bundle.crt"),
        ("HOME", "/home/panda"),
    ])
}

#[test]
fn the_routing_seed_minimal_example_loads() {
    let text = include_str!("../../examples/routing-seed-minimal.toml");
    let config = parse_with(text, &seed_env());
    let g = &config.gateway;
    assert_eq!(g.host, "127.0.0.1");
    assert_eq!(g.port, 8090);
    assert_eq!(g.separator, ".");
    assert_eq!(g.auth, InboundAuth::Disabled { allow_remote: false });
    assert!(config.rag.enabled);
    let u = only_upstream(&config);
    assert_eq!(u.namespace, "bamboo");
    assert_eq!(u.url().unwrap().as_str(), "http://localhost:8000/mcp");
    assert_eq!(u.auth, UpstreamAuth::None);
    assert!(u.tls_verify);
    assert!(config.prefixed());
}

#[test]
fn the_routing_seed_production_example_loads() {
    let text = include_str!("../../examples/routing-seed-production.toml");
    let config = parse_with(text, &seed_env());
    let g = &config.gateway;
    assert_eq!(g.host, "0.0.0.0");
    assert_eq!(g.port, 8090);
    assert_eq!(g.separator, ".");
    assert_eq!(
        g.auth,
        InboundAuth::Bearer { env: "PANDA_GATEWAY_TOKEN".into(), token: Secret::new("inbound-token".into()) }
    );

    let namespaces: Vec<&str> = config.upstreams.iter().map(|u| u.namespace.as_str()).collect();
    assert_eq!(namespaces, ["bamboo", "panda"]);

    let bamboo = &config.upstreams[0];
    assert_eq!(bamboo.url().unwrap().as_str(), "https://aipanda033.cern.ch:8000/mcp");
    assert_eq!(
        bamboo.auth,
        UpstreamAuth::Bearer { env: "BAMBOO_TOKEN".into(), token: Secret::new("bamboo-token".into()) }
    );
    assert!(bamboo.tls_verify);
    assert_eq!(bamboo.ca_bundle.as_deref(), Some(Path::new("/etc/pki/tls/certs/ca-bundle.crt")));

    // `use_sse = false`: Streamable HTTP (with the automatic legacy fallback).
    let panda = &config.upstreams[1];
    assert!(matches!(panda.endpoint, Endpoint::Http { use_sse: false, .. }));
    assert_eq!(panda.url().unwrap().as_str(), "https://panda-mcp.cern.ch/mcp");
    assert_eq!(panda.auth, UpstreamAuth::TokenFile(PathBuf::from("/home/panda/.panda_id_token")));
    assert!(panda.tls_verify);
    assert_eq!(panda.ca_bundle, None);

    // Without its secrets the same file reports each missing variable by key path.
    let errors = errors_with(text, &Env::from_pairs([("HOME", "/home/panda")]));
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["gateway.bearer_token_env", "upstreams[0].bearer_token_env", "upstreams[0].ca_bundle_env"]);
}

#[test]
fn use_sse_true_selects_the_legacy_transport() {
    let config = parse(&with_upstream("use_sse = true"));
    assert!(matches!(only_upstream(&config).endpoint, Endpoint::Http { use_sse: true, .. }));
}

#[test]
fn stdio_upstreams_get_a_clean_environment_plus_what_is_named() {
    let text = "[gateway]\nauth_disabled = true\n[[upstreams]]\nnamespace = \"s\"\ncommand = \"npx\"\nargs = [\"-y\", \"srv\"]\nenv_passthrough = [\"GITHUB_TOKEN\"]\nenv = { MODE = \"ro\" }\ncwd = \"~/work\"\n";
    let env = Env::from_pairs([
        ("PATH", "/usr/bin"),
        ("HOME", "/home/u"),
        ("GITHUB_TOKEN", "ghp"),
        ("GATEHOUSE_TOKEN", "secret"),
    ]);
    let config = Config::parse(text, &env).unwrap();
    let Endpoint::Stdio(command) = &config.upstreams[0].endpoint else { panic!("stdio") };
    assert_eq!(command.command, "npx");
    assert_eq!(command.args, ["-y", "srv"]);
    let names: Vec<&str> = command.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["PATH", "HOME", "GITHUB_TOKEN", "MODE"], "the gateway's own secrets stay home");
    assert_eq!(command.cwd.as_deref(), Some(Path::new("/home/u/work")));
    assert!(!format!("{config:?}").contains("ghp"), "env values never print");

    let both =
        "[gateway]\nauth_disabled = true\n[[upstreams]]\nnamespace = \"s\"\ncommand = \"x\"\nurl = \"http://a/mcp\"\n";
    let e = Config::parse(both, &env).unwrap_err().errors.remove(0);
    assert_eq!(e.path, "upstreams[0].command");
    let missing = "[gateway]\nauth_disabled = true\n[[upstreams]]\nnamespace = \"s\"\ncommand = \"x\"\nenv_passthrough = [\"NOPE\"]\n";
    let e = Config::parse(missing, &env).unwrap_err().errors.remove(0);
    assert_eq!(e.path, "upstreams[0].env_passthrough");
    assert!(e.message.contains("NOPE"));
}

#[test]
fn upstream_session_mode() {
    assert_eq!(only_upstream(&parse(&with_upstream(""))).session, SessionMode::Shared);
    assert_eq!(only_upstream(&parse(&with_upstream("session = \"per_client\""))).session, SessionMode::PerClient);
    let text = with_upstream("session = \"sometimes\"");
    let e = error(&text);
    assert_eq!(e.path, "upstreams[0].session");
    assert!(e.message.contains("per_client"), "{e}");
}
