//! What the fleet keeps per host class and guest shape: each judged once, then looked up by
//! index.

/// Answers kept per host class, then guest shape (indexes: no hashing per pair): the verdicts
/// and the CPUs judged so far.
pub(crate) struct ByClass<T>(Vec<Vec<Option<T>>>);

impl<T> Default for ByClass<T> {
    fn default() -> Self {
        ByClass(Vec::new())
    }
}

impl<T: Clone> ByClass<T> {
    /// The answer for `shape` on class `c`, when kept.
    pub(crate) fn get(&self, c: usize, shape: usize) -> Option<T> {
        self.0
            .get(c)
            .and_then(|row| row.get(shape).cloned().flatten())
    }

    /// Whether an answer for `shape` on class `c` is kept.
    pub(crate) fn has(&self, c: usize, shape: usize) -> bool {
        self.0
            .get(c)
            .and_then(|row| row.get(shape))
            .is_some_and(Option::is_some)
    }

    /// Keeps `value` as the answer for `shape` on class `c`.
    pub(crate) fn put(&mut self, c: usize, shape: usize, value: T) {
        if self.0.len() <= c {
            self.0.resize_with(c + 1, Vec::new);
        }
        let row = &mut self.0[c];
        if row.len() <= shape {
            row.resize(shape + 1, None);
        }
        row[shape] = Some(value);
    }
}
