//! `freeway top`: a live view of a running daemon in the terminal (ratatui), refreshed from
//! its control socket once a second: per-port and per-worker packet and bit rates, drops by
//! reason, and how full the tables are. Keys: `p` ports, `w` workers, `d` drops, `Tab` the
//! next view, `s` the next sort order, `q` or `Esc` to quit. It fits an 80×24 terminal and
//! works over ssh (plain ANSI, no mouse).

use std::path::Path;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Row, Table};
use ratatui::Frame;
use serde_json::Value;

use freeway_datapath::runtime;
use freeway_datapath::runtime::control::rates::human;

/// Which table fills the screen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    Ports,
    Workers,
    Drops,
}

/// How the ports are ordered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    Name,
    Rx,
    Tx,
    Dropped,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::Rx,
            Sort::Rx => Sort::Tx,
            Sort::Tx => Sort::Dropped,
            Sort::Dropped => Sort::Name,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Rx => "rx pps",
            Sort::Tx => "tx pps",
            Sort::Dropped => "drops",
        }
    }
}

/// What the screen shows: the last `stats` and `capture list` answers.
struct State {
    sock: String,
    view: View,
    sort: Sort,
    stats: Value,
    taps: usize,
    error: Option<String>,
}

fn ask(sock: &Path, words: &[&str]) -> Result<Value, String> {
    let w: Vec<String> = words.iter().map(|x| x.to_string()).collect();
    let r = runtime::ctl_request(sock, &w)?;
    if r["ok"] != true {
        return Err(r["error"].as_str().unwrap_or("refused").to_string());
    }
    Ok(r["data"].clone())
}

impl State {
    fn refresh(&mut self, sock: &Path) {
        match ask(sock, &["stats"]) {
            Ok(s) => {
                self.stats = s;
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
        if let Ok(t) = ask(sock, &["capture", "list"]) {
            self.taps = t
                .as_array()
                .map_or(0, |a| a.iter().filter(|t| t["state"] == "running").count());
        }
    }
}

/// `freeway top`: runs until `q`; fails at once if no daemon answers on `sock`.
pub fn run(sock: &Path, interval: Duration) -> Result<(), String> {
    let mut st = State {
        sock: sock.display().to_string(),
        view: View::Ports,
        sort: Sort::Name,
        stats: ask(sock, &["stats"])?,
        taps: 0,
        error: None,
    };
    let mut term = ratatui::try_init().map_err(|e| format!("the terminal: {e}"))?;
    let result = (|| -> std::io::Result<()> {
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                st.refresh(sock);
                next = Instant::now() + interval;
            }
            term.draw(|f| draw(f, &st))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('p') => st.view = View::Ports,
                        KeyCode::Char('w') => st.view = View::Workers,
                        KeyCode::Char('d') => st.view = View::Drops,
                        KeyCode::Tab => {
                            st.view = match st.view {
                                View::Ports => View::Workers,
                                View::Workers => View::Drops,
                                View::Drops => View::Ports,
                            }
                        }
                        KeyCode::Char('s') => st.sort = st.sort.next(),
                        _ => {}
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result.map_err(|e| format!("the terminal: {e}"))
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn draw(f: &mut Frame, st: &State) {
    let [head, body, foot] =
        Layout::vertical([Constraint::Length(3), Constraint::Min(3), Constraint::Length(1)]).areas(f.area());
    f.render_widget(
        ratatui::widgets::Paragraph::new(vec![Line::from(status_line(st))])
            .block(Block::bordered().title(format!(" freeway top: {} ", st.sock))),
        head,
    );
    let t = match st.view {
        View::Ports => ports_table(st),
        View::Workers => workers_table(st),
        View::Drops => drops_table(st),
    };
    f.render_widget(t, body);
    f.render_widget(
        Line::from("p ports  w workers  d drops  Tab next  s sort  q quit"),
        foot,
    );
}

/// The header's line: uptime, ports, workers, drop rate and how full the tables are (or why
/// the daemon did not answer).
fn status_line(st: &State) -> String {
    let s = &st.stats;
    let mut tables = format!("fdb {}", s["fdb_entries"].as_u64().unwrap_or(0));
    if let Some(c) = s["conntrack"]["connections"].as_u64() {
        tables.push_str(&format!(
            "  conntrack {c}/{}",
            s["conntrack"]["max"].as_u64().unwrap_or(0)
        ));
    }
    tables.push_str(&format!("  taps {}", st.taps));
    let up = num(&s["elapsed_s"]);
    let drops_ps = s["rates"]["drops_ps"].as_f64().map_or_else(|| "-".to_string(), human);
    match &st.error {
        Some(e) => format!("no answer: {e}"),
        None => format!(
            "up {:.0}s  {} ports  {} workers  drops {drops_ps}/s  {tables}",
            up,
            s["ports"].as_array().map_or(0, Vec::len),
            s["workers"].as_array().map_or(0, Vec::len)
        ),
    }
}

/// A bordered table of `rows` under a bold `header`, its columns `widths` wide.
fn table<'a>(rows: impl IntoIterator<Item = Row<'a>>, widths: &[u16], header: &[&'a str], title: String) -> Table<'a> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    Table::new(rows, widths.iter().map(|w| Constraint::Length(*w)))
        .header(Row::new(header.to_vec()).style(bold))
        .block(Block::bordered().title(title))
}

/// The ports view: each port's rates and drops, in the chosen order.
fn ports_table(st: &State) -> Table<'static> {
    let s = &st.stats;
    let empty = Vec::new();
    let ports = s["ports"].as_array().unwrap_or(&empty);
    let prates = s["rates"]["ports"].as_array().unwrap_or(&empty);
    let mut rows: Vec<(String, [f64; 5])> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let r = prates.get(i).unwrap_or(&Value::Null);
            (
                p["name"].as_str().unwrap_or("?").to_string(),
                [
                    num(&r["rx_pps"]),
                    num(&r["rx_bps"]),
                    num(&r["tx_pps"]),
                    num(&r["tx_bps"]),
                    num(&p["rx_dropped"]) + num(&p["tx_dropped"]),
                ],
            )
        })
        .collect();
    match st.sort {
        Sort::Name => rows.sort_by(|a, b| a.0.cmp(&b.0)),
        Sort::Rx => rows.sort_by(|a, b| b.1[0].total_cmp(&a.1[0])),
        Sort::Tx => rows.sort_by(|a, b| b.1[2].total_cmp(&a.1[2])),
        Sort::Dropped => rows.sort_by(|a, b| b.1[4].total_cmp(&a.1[4])),
    }
    let rows = rows.into_iter().map(|(n, x)| {
        Row::new(vec![
            n,
            human(x[0]),
            human(x[1]),
            human(x[2]),
            human(x[3]),
            format!("{:.0}", x[4]),
        ])
    });
    table(
        rows,
        &[14, 9, 10, 9, 10, 12],
        &["port", "rx pps", "rx bit/s", "tx pps", "tx bit/s", "dropped"],
        format!(" ports (sorted by {}) ", st.sort.name()),
    )
}

/// The workers view: each worker's core, rate, packets and sleeps.
fn workers_table(st: &State) -> Table<'static> {
    let s = &st.stats;
    let empty = Vec::new();
    let workers = s["workers"].as_array().unwrap_or(&empty);
    let pps = s["rates"]["workers_pps"].as_array().unwrap_or(&empty);
    let rows: Vec<Row> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            Row::new(vec![
                w["id"].to_string(),
                w["core"].as_u64().map_or_else(|| "-".into(), |c| c.to_string()),
                pps.get(i).map_or_else(|| "-".into(), |x| human(num(x))),
                w["packets"].to_string(),
                w["sleeps"].to_string(),
            ])
        })
        .collect();
    table(
        rows,
        &[8, 6, 10, 16, 12],
        &["worker", "core", "pps", "packets", "sleeps"],
        " workers ".into(),
    )
}

/// The drops view: every drop reason, the largest first.
fn drops_table(st: &State) -> Table<'static> {
    let mut drops: Vec<(String, u64)> = st.stats["drops"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    drops.sort_by_key(|d| std::cmp::Reverse(d.1));
    let rows = drops.into_iter().map(|(k, v)| Row::new(vec![k, v.to_string()]));
    table(rows, &[40, 16], &["drop reason", "packets"], " drops by reason ".into())
}
