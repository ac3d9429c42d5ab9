//! The Proxy tab: start and stop a proxy made from the current profile (one route per host),
//! see its routes, and watch its traffic on the same charts and request log as a burst.

use url::Url;

use crate::profile::{Profile, SecretStore};
use crate::proxy::{DEFAULT_LISTEN, ProxyConfig, profile_routes};

/// The proxy as the app knows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ProxyStatus {
    /// Not running.
    #[default]
    Stopped,
    /// Asked to start.
    Starting,
    /// Listening at `url`; `routes` are (caller URL, upstream) pairs.
    Running {
        /// Where callers send requests.
        url: Url,
        /// (caller URL, upstream) pairs.
        routes: Vec<(String, String)>,
    },
    /// Asked to stop; requests in flight finish.
    Stopping,
    /// It could not start or stopped on an error.
    Failed(String),
}

/// The tab's state: the port typed in and what runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyPanel {
    /// The port as typed.
    pub port: String,
    /// What runs.
    pub status: ProxyStatus,
}

impl Default for ProxyPanel {
    fn default() -> Self {
        let port = DEFAULT_LISTEN.rsplit(':').next().unwrap_or("8788").to_owned();
        Self { port, status: ProxyStatus::Stopped }
    }
}

/// What a click in the tab asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyAction {
    /// Nothing.
    None,
    /// Start a proxy.
    Start,
    /// Stop the proxy.
    Stop,
}

impl ProxyPanel {
    /// The proxy for `profile` on loopback at the typed port, with its limits and secrets, and
    /// one warning per host left out because its secrets cannot be resolved (an unset
    /// `${STRIPE_SECRET_KEY}`): the other hosts still get their routes. An error when no host
    /// can run, or a setting is wrong.
    pub fn config(&self, profile: &Profile, secrets: &SecretStore) -> Result<(ProxyConfig, Vec<String>), String> {
        let port: u16 = self
            .port
            .trim()
            .parse()
            .map_err(|_| format!("port '{}' is not a number from 0 to 65535", self.port.trim()))?;
        let mut runnable = profile.clone();
        let mut skipped = Vec::new();
        runnable.hosts.retain(|host| match secrets.headers_for(&profile.name, host) {
            Ok(_) => true,
            Err(err) => {
                skipped.push(format!("'{}' left out: {err}", host.name));
                false
            }
        });
        if runnable.hosts.is_empty() {
            return Err(match skipped.as_slice() {
                [] => "the profile has no hosts: add one first".to_owned(),
                reasons => format!("no host can run: {}", reasons.join("; ")),
            });
        }
        let routes = profile_routes(&runnable).map_err(|err| err.to_string())?;
        let mut config = ProxyConfig::new(routes).with_profile(&runnable, secrets).map_err(|err| err.to_string())?;
        config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        config.validate().map_err(|err| err.to_string())?;
        Ok((config, skipped))
    }
}

/// The tab: port, Start/Stop, status and routes. `profile` is the profile a start would use.
pub fn proxy_ui(ui: &mut egui::Ui, panel: &mut ProxyPanel, profile: Option<&str>) -> ProxyAction {
    let mut action = ProxyAction::None;
    let running = matches!(panel.status, ProxyStatus::Running { .. });
    let busy = matches!(panel.status, ProxyStatus::Starting | ProxyStatus::Stopping);
    ui.horizontal(|ui| {
        ui.heading("Proxy");
        let label = ui.label("Port (loopback)");
        ui.add_enabled(!running && !busy, egui::TextEdit::singleline(&mut panel.port).desired_width(60.0))
            .labelled_by(label.id);
        let start = ui
            .add_enabled(!running && !busy && profile.is_some(), egui::Button::new("Start proxy"))
            .on_hover_text("Holds the profile's keys and paces every caller through its limits");
        if start.clicked() {
            action = ProxyAction::Start;
        }
        if ui.add_enabled(running, egui::Button::new("Stop proxy")).clicked() {
            action = ProxyAction::Stop;
        }
        match profile {
            Some(name) => ui.label(format!("from profile '{name}'")),
            None => ui.label("select a profile first"),
        };
    });
    match &panel.status {
        ProxyStatus::Stopped => {
            ui.label("Stopped. Start it, then point your programs at the routes it lists.");
        }
        ProxyStatus::Starting => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("starting…");
            });
        }
        ProxyStatus::Stopping => {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("draining requests in flight…");
            });
        }
        ProxyStatus::Failed(err) => {
            ui.colored_label(super::palette::status_colors(ui.visuals()).error, format!("not running: {err}"));
        }
        ProxyStatus::Running { url, routes } => {
            ui.colored_label(super::palette::status_colors(ui.visuals()).ok, format!("listening on {url}"));
            egui::Grid::new("proxy_routes").striped(true).show(ui, |ui| {
                ui.strong("call");
                ui.strong("goes to");
                ui.end_row();
                for (from, to) in routes {
                    ui.monospace(from);
                    ui.monospace(to);
                    ui.end_row();
                }
            });
        }
    }
    action
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::HostProfile;

    /// A profile of the demo host and a host whose key is an unset environment variable.
    fn two_hosts() -> (Profile, SecretStore) {
        let mut profile = Profile::from_toml(crate::profile::DEMO_TOML).unwrap();
        let mut stripe = HostProfile::new("Stripe", "https://api.stripe.com");
        stripe.secret_headers = vec!["authorization".into()];
        profile.hosts.push(stripe);
        let mut secrets = SecretStore::in_memory();
        secrets.set(&profile.name, "Stripe", "authorization", "Bearer ${RATESCOPE_SURELY_UNSET_STRIPE_KEY}");
        (profile, secrets)
    }

    #[test]
    fn a_host_whose_secret_is_unset_is_left_out_and_named() {
        let (profile, secrets) = two_hosts();
        let (config, skipped) = ProxyPanel::default().config(&profile, &secrets).unwrap();
        let prefixes: Vec<&str> = config.routes.iter().map(|route| route.prefix.as_str()).collect();
        assert_eq!(prefixes, ["/demo-api"], "the demo host still runs");
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(
            skipped[0].starts_with("'Stripe' left out") && skipped[0].contains("RATESCOPE_SURELY_UNSET_STRIPE_KEY")
        );
    }

    #[test]
    fn no_runnable_host_is_an_error_naming_why() {
        let (mut profile, secrets) = two_hosts();
        profile.hosts.retain(|host| host.name == "Stripe");
        let err = ProxyPanel::default().config(&profile, &secrets).unwrap_err();
        assert!(err.starts_with("no host can run: 'Stripe' left out"), "{err}");
    }
}
