//! A trace's critical path: the chain of span sections that decides its end-to-end
//! time, computed as Jaeger UI computes it (`getCriticalPath`), so the two agree.
//!
//! 1. Each child is clipped to its parent's interval (clock skew between hosts can put a
//!    child partly, or wholly, outside its parent; a child wholly outside is dropped with
//!    its subtree, as it cannot have delayed the parent).
//! 2. Walking back from the end of a span: the child that finished last before the
//!    current point is on the path; the parent's time after that child ended is the
//!    parent's own section; then the path continues from that child's end backwards
//!    inside the child, and afterwards in the parent before the child's start.
//!
//! Sections cover the root's interval exactly once, so they add up to its duration.
//! The input is index-based ([`PathSpan`]), so the viewer's stored spans and the Jaeger
//! JSON model both feed it without copying attributes.

/// One span as the algorithm sees it: its parent's index (if the parent is in the same
/// slice) and its interval, in any one unit (µs or ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathSpan {
    pub parent: Option<usize>,
    pub start: u64,
    pub end: u64,
}

/// A stretch of time on the critical path, spent in `span` itself (not in a child).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub span: usize,
    pub start: u64,
    pub end: u64,
}

impl Section {
    pub fn duration(&self) -> u64 {
        self.end - self.start
    }
}

/// Children of each span, clipped to their parent, latest-ending first. A span that
/// names itself (or a later ancestor loop) as parent is no one's child.
struct Tree {
    /// Clipped intervals; `None` for a span dropped with its subtree.
    clipped: Vec<Option<(u64, u64)>>,
    children: Vec<Vec<usize>>,
}

impl Tree {
    fn new(spans: &[PathSpan], root: usize) -> Self {
        let mut children = vec![Vec::new(); spans.len()];
        for (i, span) in spans.iter().enumerate() {
            if let Some(parent) = span.parent.filter(|&p| p != i && p < spans.len()) {
                children[parent].push(i);
            }
        }
        let mut clipped = vec![None; spans.len()];
        let root_span = spans[root];
        clipped[root] = Some((root_span.start, root_span.end.max(root_span.start)));
        // Breadth-first from the root: a span is visited once, so a parent loop that
        // does not pass through the root is never entered.
        let mut queue = std::collections::VecDeque::from([root]);
        let mut seen = vec![false; spans.len()];
        seen[root] = true;
        while let Some(parent) = queue.pop_front() {
            let Some((p_start, p_end)) = clipped[parent] else {
                continue;
            };
            for &child in &children[parent] {
                if std::mem::replace(&mut seen[child], true) {
                    continue;
                }
                let span = spans[child];
                let end = span.end.max(span.start);
                if span.start >= p_end || end <= p_start {
                    continue;
                }
                clipped[child] = Some((span.start.max(p_start), end.min(p_end)));
                queue.push_back(child);
            }
        }
        for list in &mut children {
            list.retain(|&c| clipped[c].is_some());
            // Latest end first; of equal ends, the later start (the shorter) first.
            list.sort_by_key(|&c| std::cmp::Reverse(clipped[c].map(|(start, end)| (end, start))));
        }
        Self { clipped, children }
    }

    fn interval(&self, span: usize) -> (u64, u64) {
        self.clipped[span].unwrap_or((0, 0))
    }

    /// The child of `span` that ends last, at or before `before` (Jaeger UI asks for
    /// strictly before, which skips a child that ended the instant the next began).
    fn last_finishing(&self, span: usize, before: u64) -> Option<usize> {
        self.children[span]
            .iter()
            .copied()
            .find(|&c| self.interval(c).1 <= before)
    }
}

/// The critical path under `root`, in time order. Spans not under `root` are ignored.
/// Returns nothing if `root` is out of range.
pub fn critical_path(spans: &[PathSpan], root: usize) -> Vec<Section> {
    if root >= spans.len() {
        return Vec::new();
    }
    let tree = Tree::new(spans, root);
    let mut sections = Vec::new();
    // An explicit stack, not recursion: a trace can be thousands of spans deep.
    // Each frame: a span and the point in it the walk goes back from.
    let (_, root_end) = tree.interval(root);
    let mut stack = vec![(root, root_end)];
    while let Some((span, until)) = stack.pop() {
        let (start, _) = tree.interval(span);
        match tree.last_finishing(span, until) {
            Some(child) => {
                let (child_start, child_end) = tree.interval(child);
                if child_end < until {
                    sections.push(Section {
                        span,
                        start: child_end,
                        end: until,
                    });
                }
                // After the child's own path, the parent goes on before the child began.
                if child_start > start {
                    stack.push((span, child_start));
                }
                stack.push((child, child_end));
            }
            None => {
                if start < until {
                    sections.push(Section {
                        span,
                        start,
                        end: until,
                    });
                }
            }
        }
    }
    sections.reverse();
    sections
}

/// The root to walk from: the earliest-starting span without a parent in the slice (of
/// those starting together, the longest); `None` for an empty trace.
pub fn root_of(spans: &[PathSpan]) -> Option<usize> {
    spans
        .iter()
        .enumerate()
        .filter(|(i, s)| s.parent.is_none_or(|p| p == *i || p >= spans.len()))
        .min_by_key(|(_, s)| (s.start, std::cmp::Reverse(s.end)))
        .map(|(i, _)| i)
}

/// Each span's self time: its (clipped) interval less the union of its children's
/// clipped intervals, as Jaeger UI's trace statistics count it. Spans not under
/// `root` get 0.
pub fn self_times(spans: &[PathSpan], root: usize) -> Vec<u64> {
    if root >= spans.len() {
        return vec![0; spans.len()];
    }
    let tree = Tree::new(spans, root);
    (0..spans.len())
        .map(|span| {
            let Some((start, end)) = tree.clipped[span] else {
                return 0;
            };
            let mut children: Vec<(u64, u64)> = tree.children[span]
                .iter()
                .map(|&c| tree.interval(c))
                .collect();
            children.sort_unstable();
            let mut covered = 0;
            let mut reach = start;
            for (c_start, c_end) in children {
                let from = c_start.max(reach);
                if c_end > from {
                    covered += c_end - from;
                    reach = c_end;
                }
            }
            (end - start) - covered
        })
        .collect()
}

/// A Jaeger trace's spans as the algorithm sees them (µs), in the trace's order; a
/// parent not in the trace leaves the span without one.
pub fn path_spans(trace: &crate::jaeger::Trace) -> Vec<PathSpan> {
    let index: std::collections::HashMap<&str, usize> = trace
        .spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.as_str(), i))
        .collect();
    trace
        .spans
        .iter()
        .map(|s| PathSpan {
            parent: s.parent_id().and_then(|p| index.get(p).copied()),
            start: s.start_time,
            end: s.end_time(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(parent: Option<usize>, start: u64, end: u64) -> PathSpan {
        PathSpan { parent, start, end }
    }

    fn sec(span: usize, start: u64, end: u64) -> Section {
        Section { span, start, end }
    }

    fn total(sections: &[Section]) -> u64 {
        sections.iter().map(Section::duration).sum()
    }

    #[test]
    fn serial_children_are_all_on_the_path_with_the_gaps_in_the_parent() {
        // root 0..100; a 10..40, b 50..90 (serial)
        let spans = [
            span(None, 0, 100),
            span(Some(0), 10, 40),
            span(Some(0), 50, 90),
        ];
        let path = critical_path(&spans, 0);
        assert_eq!(
            path,
            vec![
                sec(0, 0, 10),
                sec(1, 10, 40),
                sec(0, 40, 50),
                sec(2, 50, 90),
                sec(0, 90, 100)
            ]
        );
        assert_eq!(total(&path), 100);
    }

    #[test]
    fn of_overlapping_children_the_last_to_finish_wins_and_an_overlapped_one_is_skipped() {
        // root 0..100; a 10..80; b 20..60 (within a's time); c 5..15 (overlaps a's
        // start); d 1..8.
        let spans = [
            span(None, 0, 100),
            span(Some(0), 10, 80),
            span(Some(0), 20, 60),
            span(Some(0), 5, 15),
            span(Some(0), 1, 8),
        ];
        // Back from 100: a ends last (80) → root 80..100, a 10..80; back from 10 in
        // the root: c ends at 15 > 10, not before; d ends at 8 → root 8..10, d 1..8,
        // root 0..1. b and c are not on the path.
        let path = critical_path(&spans, 0);
        assert_eq!(
            path,
            vec![
                sec(0, 0, 1),
                sec(4, 1, 8),
                sec(0, 8, 10),
                sec(1, 10, 80),
                sec(0, 80, 100)
            ]
        );
    }

    #[test]
    fn the_path_descends_into_grandchildren() {
        // root 0..100 → a 10..90 → x 20..50, y 40..85 (parallel, y last)
        let spans = [
            span(None, 0, 100),
            span(Some(0), 10, 90),
            span(Some(1), 20, 50),
            span(Some(1), 40, 85),
        ];
        let path = critical_path(&spans, 0);
        assert_eq!(
            path,
            vec![
                sec(0, 0, 10),
                sec(1, 10, 40),
                sec(3, 40, 85),
                sec(1, 85, 90),
                sec(0, 90, 100)
            ]
        );
        assert_eq!(total(&path), 100);
    }

    #[test]
    fn clock_skewed_children_are_clipped_to_their_parent_or_dropped() {
        // a starts before the root and ends inside it; b ends after the root; c lies
        // wholly after the root (dropped, with its child d).
        let spans = [
            span(None, 100, 200),
            span(Some(0), 90, 130),
            span(Some(0), 150, 230),
            span(Some(0), 300, 400),
            span(Some(3), 310, 320),
        ];
        let path = critical_path(&spans, 0);
        assert_eq!(
            path,
            vec![sec(1, 100, 130), sec(0, 130, 150), sec(2, 150, 200)]
        );
        assert_eq!(total(&path), 100);
    }

    #[test]
    fn loops_and_self_parents_do_not_hang() {
        // 1 names itself; 2 and 3 name each other; 4 is a child of 0.
        let spans = [
            span(None, 0, 50),
            span(Some(1), 5, 10),
            span(Some(3), 10, 20),
            span(Some(2), 12, 18),
            span(Some(0), 20, 30),
        ];
        assert_eq!(
            critical_path(&spans, 0),
            vec![sec(0, 0, 20), sec(4, 20, 30), sec(0, 30, 50)]
        );
        assert_eq!(root_of(&spans), Some(0));
    }

    #[test]
    fn nine_serial_visits_are_nine_sections_and_parallel_ones_one() {
        // The study's stage 2: a query visiting nine partitions one after another.
        let mut serial = vec![span(None, 0, 1000)];
        for i in 0..9 {
            serial.push(span(Some(0), 10 + i * 100, 100 + i * 100));
        }
        let on_path = |spans: &[PathSpan]| {
            critical_path(spans, 0)
                .iter()
                .filter(|s| s.span != 0)
                .count()
        };
        assert_eq!(on_path(&serial), 9);
        // Stage 3: the same nine visits at once; only the last to finish is on the path.
        let mut parallel = vec![span(None, 0, 200)];
        for i in 0..9 {
            parallel.push(span(Some(0), 10 + i, 100 + i * 10));
        }
        assert_eq!(on_path(&parallel), 1);
    }

    #[test]
    fn an_empty_or_out_of_range_root_has_no_path() {
        assert_eq!(critical_path(&[], 0), vec![]);
        assert_eq!(root_of(&[]), None);
        assert_eq!(critical_path(&[span(None, 5, 5)], 0), vec![]);
    }

    #[test]
    fn self_time_is_what_no_child_covers() {
        // root 0..100 with children 10..40 and 30..60 (overlapping: 50 covered) and
        // 90..120 (clipped to 90..100); the first child has its own child 15..20.
        let spans = [
            span(None, 0, 100),
            span(Some(0), 10, 40),
            span(Some(0), 30, 60),
            span(Some(0), 90, 120),
            span(Some(1), 15, 20),
        ];
        assert_eq!(self_times(&spans, 0), vec![40, 25, 30, 10, 5]);
    }
}
