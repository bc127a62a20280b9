//! How `worlds dev` shows progress on stderr: live bars on a terminal, plain lines elsewhere.

use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::tally::Tally;
use crate::escape::escaped;

/// The progress display of a session.
pub(crate) enum Display {
    /// Bars redrawn in place (stderr is a terminal).
    Live(Live),
    /// One line per change (stderr is a file or a pipe: tests, CI, logs).
    Plain(Plain),
}

impl Display {
    /// Live bars if `terminal`, else plain lines.
    pub(crate) fn new(terminal: bool) -> Display {
        if terminal {
            Display::Live(Live::new())
        } else {
            Display::Plain(Plain {
                since: Instant::now(),
                last: None,
            })
        }
    }

    /// Shows `tally`.
    pub(crate) fn update(&mut self, tally: &Tally) {
        match self {
            Display::Live(live) => live.update(tally),
            Display::Plain(plain) => plain.update(tally),
        }
    }

    /// Draws the last state and leaves it; what is printed next goes below it.
    pub(crate) fn finish(self) {
        if let Display::Live(live) = self {
            live.finish();
        }
    }

    /// Leaves the display as it was last drawn, without drawing again: after Ctrl-C, whose `^C`
    /// echo moved the terminal's cursor to a new line, a redraw would land one line off.
    pub(crate) fn freeze(self) {
        if let Display::Live(live) = self {
            live.freeze();
        }
    }
}

/// Bars: all runs, then one per workflow, then the runs by status and where they came from.
pub(crate) struct Live {
    multi: MultiProgress,
    all: ProgressBar,
    workflows: Vec<(String, ProgressBar)>,
    in_flight: ProgressBar,
    finished: ProgressBar,
    sources: ProgressBar,
}

/// Width of the bars' name column.
const NAME_WIDTH: usize = 12;
/// How often the bars are redrawn even if nothing changed.
const REDRAW: Duration = Duration::from_millis(200);

impl Live {
    fn new() -> Live {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let all = multi.add(
            ProgressBar::new(0)
                .with_style(bar_style("{elapsed:>4}"))
                .with_prefix("all runs"),
        );
        // Redraw regularly: an update changes several lines, and the draws of a burst of
        // changes are rate-limited, so the last of them can wait for the next draw.
        all.enable_steady_tick(REDRAW);
        let line = |label: &'static str| {
            multi.add(
                ProgressBar::new(0)
                    .with_style(line_style())
                    .with_prefix(label),
            )
        };
        Live {
            in_flight: line("in flight"),
            finished: line("finished"),
            sources: line(""),
            multi,
            all,
            workflows: Vec::new(),
        }
    }

    fn update(&mut self, tally: &Tally) {
        for (name, count) in tally.workflows() {
            let bar = match self.workflows.iter().find(|(known, _)| known == name) {
                Some((_, bar)) => bar.clone(),
                None => {
                    let bar = self.multi.insert_before(
                        &self.in_flight,
                        ProgressBar::new(0)
                            .with_style(bar_style(""))
                            .with_prefix(escaped(name).to_string()),
                    );
                    self.workflows.push((name.to_owned(), bar.clone()));
                    bar
                }
            };
            set(&bar, count.finished, count.total);
        }
        self.in_flight.set_message(tally.in_flight_line());
        self.finished.set_message(tally.finished_line());
        self.sources.set_message(tally.sources_line());
        set(&self.all, tally.finished(), tally.total());
    }

    fn freeze(self) {
        self.all.disable_steady_tick();
        self.multi.set_draw_target(ProgressDrawTarget::hidden());
        // The cursor is at the end of the bars' last line, or after a `^C` below it.
        eprintln!();
    }

    fn finish(self) {
        self.all.disable_steady_tick();
        for (_, bar) in &self.workflows {
            bar.abandon();
        }
        self.in_flight.abandon();
        self.finished.abandon();
        self.sources.abandon();
        self.all.abandon();
    }
}

/// Sets a bar to `finished` of `total`.
fn set(bar: &ProgressBar, finished: usize, total: usize) {
    bar.set_length(total as u64);
    bar.set_position(finished as u64);
}

/// A bar with its name, `finished/total` and `extra` (a template fragment) after it.
fn bar_style(extra: &str) -> ProgressStyle {
    ProgressStyle::with_template(&bar_template(extra))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("█▌ ")
}

/// The template of [`bar_style`].
fn bar_template(extra: &str) -> String {
    format!("{{prefix:>{NAME_WIDTH}}} [{{bar:32.green/white}}] {{pos:>4}}/{{len:<4}} {extra}")
}

/// A line of text under the bars.
fn line_style() -> ProgressStyle {
    ProgressStyle::with_template(&line_template()).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// The template of [`line_style`]: a label in the bars' name column, then the message.
fn line_template() -> String {
    format!("{{prefix:>{NAME_WIDTH}}} {{msg}}")
}

/// Plain lines: one each time the counts change, with the time since the session began.
pub(crate) struct Plain {
    since: Instant,
    last: Option<String>,
}

impl Plain {
    fn update(&mut self, tally: &Tally) {
        let line = plain_line(tally);
        if self.last.as_deref() != Some(line.as_str()) {
            eprintln!("{} {line}", elapsed(self.since.elapsed()));
            self.last = Some(line);
        }
    }
}

/// The counts as one line: `finished 3/20 · pending 0 · … · resumed 0 · started 20/20`.
pub(crate) fn plain_line(tally: &Tally) -> String {
    format!(
        "finished {}/{} · {} · {}",
        tally.finished(),
        tally.total(),
        tally.statuses_line(),
        tally.sources_line()
    )
}

/// `[  12.3s]`.
fn elapsed(duration: Duration) -> String {
    format!("[{:>6.1}s]", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use worlds_engine::RunStatus;

    use super::*;

    #[test]
    fn plain_line_has_every_count() {
        let mut tally = Tally::new(0, 2, 3);
        tally.add("checkout", RunStatus::Completed);
        tally.add("order-saga", RunStatus::Running);
        assert_eq!(
            plain_line(&tally),
            "finished 1/2 · pending 0 · running 1 · compensating 0 · completed 1 · compensated 0 · \
             failed 0 · cancelled 0 · resumed 0 · started 2/3"
        );
        assert_eq!(elapsed(Duration::from_millis(12_345)), "[  12.3s]");
    }

    #[test]
    fn templates_parse() {
        for template in [
            bar_template("{elapsed:>4}"),
            bar_template(""),
            line_template(),
        ] {
            assert!(
                ProgressStyle::with_template(&template).is_ok(),
                "{template}"
            );
        }
    }
}
