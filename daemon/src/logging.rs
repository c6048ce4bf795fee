//! The tracing subscriber the binaries install (libraries never install one).

use tracing_subscriber::EnvFilter;

use crate::env::Env;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?} (use text or json)")),
        }
    }
}

/// The filter directives: `<var>` if set, else `RUST_LOG`, else `default`.
pub fn filter_directives(env: &dyn Env, var: &str, default: &str) -> String {
    env.var(var)
        .or_else(|| env.var("RUST_LOG"))
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// Installs the global subscriber, writing to stderr, in colour only when stderr is a terminal
/// (a journal or a file gets no escape codes). A bad filter falls back to `default`.
pub fn init_logging(env: &dyn Env, var: &str, default: &str, format: LogFormat) {
    let directives = filter_directives(env, var, default);
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("ignoring invalid log filter {directives:?} from {var}: {e}");
        EnvFilter::new(default)
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_variable_wins_over_rust_log_and_the_default() {
        let env = [("CLOUDCORE_LOG", "debug"), ("RUST_LOG", "trace")];
        assert_eq!(filter_directives(&env, "CLOUDCORE_LOG", "warn"), "debug");
        let env = [("RUST_LOG", "trace")];
        assert_eq!(filter_directives(&env, "CLOUDCORE_LOG", "warn"), "trace");
        let env: [(&str, &str); 0] = [];
        assert_eq!(filter_directives(&env, "CLOUDCORE_LOG", "warn"), "warn");
    }
}
