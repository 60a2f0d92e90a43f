//! Work spread over the machine's cores, answers in order: reading a thousand hosts' facts
//! (100 MB of XML to parse) is most of what a fleet or cluster answer costs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

/// `f` of every item of `items`, in order, the items spread over up to 8 threads (one per core);
/// on one core, or for one item, in this thread.
pub fn map_ordered<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = thread::available_parallelism()
        .map_or(1, usize::from)
        .min(8)
        .min(items.len());
    if workers < 2 {
        return items.iter().map(f).collect();
    }
    let f = &f;
    // Each worker takes the next item when done with its last: files of very different sizes
    // (a fleet's hosts beside their guests, sorted so that they alternate) keep every core busy,
    // where a fixed share would give one worker every large file.
    let next = AtomicUsize::new(0);
    let next = &next;
    let mut out: Vec<Option<R>> = Vec::new();
    out.resize_with(items.len(), || None);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(move || {
                    std::iter::from_fn(|| {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        items.get(i).map(|item| (i, f(item)))
                    })
                    .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            // A worker that panicked is a bug: let it show as one.
            for (i, r) in h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)) {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_come_in_the_items_order() {
        let items: Vec<u32> = (0..1000).collect();
        let got = super::map_ordered(&items, |i| i * 2);
        assert_eq!(got, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert!(super::map_ordered(&[] as &[u32], |i| *i).is_empty());
    }
}
