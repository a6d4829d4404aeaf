//! Java semantics the store formats depend on (spec §15).
//!
//! RocketMQ hashes strings with `String.hashCode()` over UTF-16 code units of the string Java obtains by
//! decoding the stored UTF-8 bytes. Decoding never fails: malformed input becomes U+FFFD, following Java's
//! rules, which differ from the Unicode "maximal subpart" practice only for UTF-8-encoded surrogates
//! (`ED A0..BF ..`): Java replaces the whole 3-byte sequence (or a truncated 2-byte tail) by one U+FFFD.

/// `String.hashCode()` of a Rust string: `h = 31·h + c` over UTF-16 code units, wrapping i32.
pub fn string_hash(s: &str) -> i32 {
    if s.is_ascii() {
        return ascii_hash(s.as_bytes());
    }
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// `String.hashCode()` of ASCII text (one UTF-16 unit per byte); a `const fn`, so fixed names hash at compile
/// time.
pub(crate) const fn ascii_hash(bytes: &[u8]) -> i32 {
    let mut h = 0i32;
    let mut i = 0;
    while i < bytes.len() {
        h = h.wrapping_mul(31).wrapping_add(bytes[i] as i32);
        i += 1;
    }
    h
}

/// `new String(bytes, UTF_8).hashCode()`: the hash Java computes for text stored as (possibly malformed) UTF-8.
pub fn utf8_bytes_hash(bytes: &[u8]) -> i32 {
    if bytes.is_ascii() {
        return ascii_hash(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => string_hash(s),
        Err(_) => string_hash(&decode_utf8_lossy(bytes)),
    }
}

/// Decodes UTF-8 exactly as `new String(bytes, StandardCharsets.UTF_8)` does on JDK 17.
pub fn decode_utf8_lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (valid, bad) = rest.split_at(e.valid_up_to());
                // `valid` is valid UTF-8 by construction of `valid_up_to`.
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                out.push('\u{FFFD}');
                let skip = java_malformed_len(bad).unwrap_or(match e.error_len() {
                    Some(n) => n,
                    None => bad.len(), // truncated sequence at the end: one U+FFFD for the tail
                });
                rest = bad.get(skip..).unwrap_or_default();
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Java's malformed length where it differs from the maximal-subpart rule: a surrogate encoded in UTF-8.
fn java_malformed_len(bad: &[u8]) -> Option<usize> {
    match bad {
        [0xED, b2, rest @ ..] if (0xA0..=0xBF).contains(b2) => match rest.first() {
            Some(b3) if b3 & 0xC0 == 0x80 => Some(3),
            _ => Some(2),
        },
        _ => None,
    }
}

/// Java `String.split(sep)` for a literal single-character separator: trailing empty tokens are removed.
pub fn split_java(s: &str, sep: char) -> Vec<&str> {
    if !s.contains(sep) {
        return vec![s];
    }
    let mut parts: Vec<&str> = s.split(sep).collect();
    while parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

/// Java `Long.parseLong`: optional sign, ASCII digits only, no whitespace, must fit i64.
pub fn parse_long(s: &str) -> Option<i64> {
    parse_integer(s)
}

/// Java `Integer.parseInt`: optional sign, ASCII digits only, no whitespace, must fit i32.
pub fn parse_int(s: &str) -> Option<i32> {
    parse_integer(s)
}

/// Java's `parseInt` / `parseLong` checks (an optional sign, then ASCII digits only), then the parse as `T`.
fn parse_integer<T: std::str::FromStr>(s: &str) -> Option<T> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<T>().ok()
}

/// A key of a Java hash map: its `hashCode()` (equality is Rust's).
pub trait JavaHash: Eq + Clone {
    /// `hashCode()`: `String.hashCode` for text, the value itself for `Integer`.
    fn java_hash(&self) -> i32;
    /// `compareTo`: UTF-16 code units for text, numbers for `Integer`.
    fn java_cmp(&self, other: &Self) -> std::cmp::Ordering;
}

impl JavaHash for String {
    fn java_hash(&self) -> i32 {
        string_hash(self)
    }
    fn java_cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.encode_utf16().cmp(other.encode_utf16())
    }
}

impl JavaHash for &str {
    fn java_hash(&self) -> i32 {
        string_hash(self)
    }
    fn java_cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.encode_utf16().cmp(other.encode_utf16())
    }
}

impl JavaHash for i32 {
    fn java_hash(&self) -> i32 {
        *self
    }
    fn java_cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.cmp(other)
    }
}

/// `HashMap.tableSizeFor`: the smallest power of two >= `cap` (at least 1, at most 2^30).
fn table_size_for(cap: usize) -> usize {
    cap.clamp(1, MAXIMUM_CAPACITY).next_power_of_two().min(MAXIMUM_CAPACITY)
}

const MAXIMUM_CAPACITY: usize = 1 << 30;
/// A list bin becomes a tree at this many nodes (if the table is large enough).
const TREEIFY_THRESHOLD: usize = 8;
/// A tree bin split by a resize becomes a list again at this many nodes or fewer.
const UNTREEIFY_THRESHOLD: usize = 6;
/// Below this many bins a long list grows the table instead of becoming a tree.
const MIN_TREEIFY_CAPACITY: usize = 64;

/// One bin: its nodes in iteration order, and whether it is a tree bin (`TreeBin` / `TreeNode`s).
#[derive(Debug, Clone)]
struct Bin<K> {
    tree: bool,
    nodes: Vec<(u32, K)>,
}

impl<K> Default for Bin<K> {
    fn default() -> Self {
        Bin { tree: false, nodes: Vec::new() }
    }
}

/// The iteration order of a `java.util.concurrent.ConcurrentHashMap` (JDK 8 to 21, one thread), followed
/// through every `put` and `remove`: lazy table creation, growth when the size reaches `sizeCtl`, lists that
/// append, lists of 8 that grow a small table (`tryPresize`) or become tree bins (where new keys go first),
/// and resizes that split each bin with `lastRun` (the nodes before the last run are re-linked in reverse).
/// Iteration walks the bins in index order and each bin in node order, as `Traverser` does.
///
/// One approximation: removing a key from a tree bin turns the bin back into a list when 6 or fewer remain
/// (Java decides from the red-black tree's shape); tree bins need 8 keys whose spread hashes collide.
#[derive(Debug, Clone)]
pub struct ConcurrentHashMapOrder<K> {
    table: Vec<Bin<K>>,
    /// Before the table exists: its size (0 for the default 16); after: the size that triggers a resize.
    size_ctl: usize,
    count: usize,
}

impl<K: JavaHash> ConcurrentHashMapOrder<K> {
    /// `new ConcurrentHashMap<>()`: 16 bins on the first put.
    pub fn new() -> Self {
        ConcurrentHashMapOrder { table: Vec::new(), size_ctl: 0, count: 0 }
    }

    /// `new ConcurrentHashMap<>(initialCapacity)`: `tableSizeFor(1 + initialCapacity / 0.75f)` bins.
    pub fn with_capacity(initial: usize) -> Self {
        let size = 1.0 + f64::from(initial as f32 / 0.75_f32);
        ConcurrentHashMapOrder { table: Vec::new(), size_ctl: table_size_for(size as usize), count: 0 }
    }

    /// `spread(hashCode)`: `(h ^ (h >>> 16)) & 0x7fffffff`.
    fn spread(key: &K) -> u32 {
        let h = key.java_hash() as u32;
        (h ^ (h >> 16)) & 0x7fff_ffff
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Keys in iteration order.
    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.table.iter().flat_map(|bin| bin.nodes.iter().map(|(_, k)| k))
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &K) -> bool {
        self.table.get(self.index(Self::spread(key))).is_some_and(|b| b.nodes.iter().any(|(_, k)| k == key))
    }

    fn index(&self, h: u32) -> usize {
        (h as usize) & self.table.len().wrapping_sub(1)
    }

    /// `put(key, value)`: returns true when the key is new.
    pub fn put(&mut self, key: K) -> bool {
        if self.table.is_empty() {
            let n = if self.size_ctl > 0 { self.size_ctl } else { 16 };
            self.table = (0..n).map(|_| Bin::default()).collect();
            self.size_ctl = n - (n >> 2);
        }
        let h = Self::spread(&key);
        let i = self.index(h);
        let bin = &mut self.table[i];
        if bin.nodes.is_empty() {
            bin.nodes.push((h, key));
        } else if bin.tree {
            if bin.nodes.iter().any(|(_, k)| *k == key) {
                return false;
            }
            bin.nodes.insert(0, (h, key)); // TreeBin.putTreeVal makes the new node `first`
        } else {
            // `binCount`: the 1-based position of the key found, or the length of the list it was appended to.
            let found = bin.nodes.iter().position(|(_, k)| *k == key);
            let bin_count = match found {
                Some(j) => j + 1,
                None => {
                    bin.nodes.push((h, key));
                    bin.nodes.len() - 1
                }
            };
            if bin_count >= TREEIFY_THRESHOLD {
                self.treeify_bin(i);
            }
            if found.is_some() {
                return false;
            }
        }
        self.count += 1;
        while self.count >= self.size_ctl && self.table.len() < MAXIMUM_CAPACITY {
            self.transfer();
        }
        true
    }

    /// `remove(key)`: returns true when the key was present.
    pub fn remove(&mut self, key: &K) -> bool {
        if self.table.is_empty() {
            return false;
        }
        let i = self.index(Self::spread(key));
        let bin = &mut self.table[i];
        let Some(j) = bin.nodes.iter().position(|(_, k)| k == key) else { return false };
        bin.nodes.remove(j);
        if bin.tree && bin.nodes.len() <= UNTREEIFY_THRESHOLD {
            bin.tree = false;
        }
        self.count -= 1;
        true
    }

    fn treeify_bin(&mut self, i: usize) {
        let n = self.table.len();
        if n < MIN_TREEIFY_CAPACITY {
            self.try_presize(n << 1);
        } else {
            self.table[i].tree = true; // same node order
        }
    }

    fn try_presize(&mut self, size: usize) {
        let c = if size >= MAXIMUM_CAPACITY >> 1 { MAXIMUM_CAPACITY } else { table_size_for(size + (size >> 1) + 1) };
        while c > self.size_ctl && self.table.len() < MAXIMUM_CAPACITY {
            self.transfer();
        }
    }

    /// Doubles the table, splitting each bin as `ConcurrentHashMap.transfer` does.
    fn transfer(&mut self) {
        let n = self.table.len();
        let old = std::mem::take(&mut self.table);
        let mut next: Vec<Bin<K>> = (0..2 * n).map(|_| Bin::default()).collect();
        for (i, bin) in old.into_iter().enumerate() {
            let (lo, hi) = if bin.tree { split_tree(bin.nodes, n) } else { split_list(bin.nodes, n) };
            next[i] = lo;
            next[i + n] = hi;
        }
        self.table = next;
        self.size_ctl = (n << 1) - (n >> 1);
    }
}

impl<K: JavaHash> Default for ConcurrentHashMapOrder<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// A list bin split by `transfer`: the nodes from `lastRun` on (one side) keep their order; each node before it
/// is pushed on the front of its side, so those come out reversed.
fn split_list<K>(nodes: Vec<(u32, K)>, n: usize) -> (Bin<K>, Bin<K>) {
    let bit = |h: u32| (h as usize) & n != 0;
    let last_run = (1..nodes.len()).rev().find(|&j| bit(nodes[j].0) != bit(nodes[j - 1].0)).unwrap_or(0);
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    let mut nodes = nodes;
    let run = nodes.split_off(last_run);
    for node in nodes.into_iter().rev() {
        if bit(node.0) {
            hi.push(node);
        } else {
            lo.push(node);
        }
    }
    // `lo` and `hi` now hold the prefix reversed; the run goes after them, on its side.
    match run.first() {
        Some(&(h, _)) if bit(h) => hi.extend(run),
        _ => lo.extend(run),
    }
    (Bin { tree: false, nodes: lo }, Bin { tree: false, nodes: hi })
}

/// A tree bin split by `transfer`: both sides keep their order; a side of 6 nodes or fewer becomes a list.
fn split_tree<K>(nodes: Vec<(u32, K)>, n: usize) -> (Bin<K>, Bin<K>) {
    let (hi, lo): (Vec<_>, Vec<_>) = nodes.into_iter().partition(|(h, _)| (*h as usize) & n != 0);
    let side = |nodes: Vec<(u32, K)>| Bin { tree: nodes.len() > UNTREEIFY_THRESHOLD, nodes };
    (side(lo), side(hi))
}

/// The iteration order of a `java.util.HashMap` (or `HashSet`) built by `put`s only (JDK 8 to 21): lists that
/// append, growth when the size exceeds 3/4 of the bins, resizes that keep each bin's order, lists of 9 that
/// double a table of fewer than 64 bins or else become tree bins. A tree bin is iterated in its `next` order:
/// a new node goes right after its parent in the red-black tree, and the root is moved to the front after each
/// insertion ([`HashTreeBin`]).
#[derive(Debug, Clone)]
pub struct HashMapOrder<K> {
    table: Vec<HashBin<K>>,
    threshold: usize,
    count: usize,
}

#[derive(Debug, Clone)]
enum HashBin<K> {
    List(Vec<(i32, K)>),
    Tree(HashTreeBin<K>),
}

impl<K: JavaHash> HashBin<K> {
    fn nodes(self) -> Vec<(i32, K)> {
        match self {
            HashBin::List(nodes) => nodes,
            HashBin::Tree(tree) => tree.into_nodes(),
        }
    }
}

impl<K: JavaHash> HashMapOrder<K> {
    /// `new HashMap<>(initialCapacity)`.
    pub fn with_capacity(initial: usize) -> Self {
        HashMapOrder { table: Vec::new(), threshold: table_size_for(initial), count: 0 }
    }

    /// `put(key, ...)`: returns true when the key is new.
    pub fn put(&mut self, key: K) -> bool {
        if self.table.is_empty() {
            self.table = (0..self.threshold).map(|_| HashBin::List(Vec::new())).collect();
            self.threshold = self.table.len() * 3 / 4;
        }
        let h = key.java_hash();
        let h = h ^ ((h as u32) >> 16) as i32;
        let n = self.table.len();
        let i = (h as u32 as usize) & (n - 1);
        match &mut self.table[i] {
            HashBin::Tree(tree) => {
                if !tree.put(h, key) {
                    return false;
                }
            }
            HashBin::List(bin) => {
                if bin.iter().any(|(_, k)| *k == key) {
                    return false;
                }
                bin.push((h, key));
                if bin.len() > TREEIFY_THRESHOLD {
                    if n < MIN_TREEIFY_CAPACITY {
                        self.resize();
                    } else {
                        let nodes = std::mem::take(bin);
                        self.table[i] = HashBin::Tree(HashTreeBin::treeify(nodes));
                    }
                }
            }
        }
        self.count += 1;
        if self.count > self.threshold {
            self.resize();
        }
        true
    }

    fn resize(&mut self) {
        let n = self.table.len();
        let old = std::mem::take(&mut self.table);
        let mut next: Vec<HashBin<K>> = (0..2 * n).map(|_| HashBin::List(Vec::new())).collect();
        for (i, bin) in old.into_iter().enumerate() {
            let was_tree = matches!(bin, HashBin::Tree(_));
            let tree = match &bin {
                HashBin::Tree(t) => Some(t.clone()),
                HashBin::List(_) => None,
            };
            let (lo, hi): (Vec<_>, Vec<_>) = bin.nodes().into_iter().partition(|(h, _)| (*h as u32 as usize) & n == 0);
            let (lc, hc) = (lo.len(), hi.len());
            for (side, nodes, other) in [(i, lo, hc), (i + n, hi, lc)] {
                next[side] = if !was_tree || nodes.len() <= UNTREEIFY_THRESHOLD {
                    HashBin::List(nodes)
                } else if other == 0 {
                    // Every node went this way: the tree is kept as it was.
                    HashBin::Tree(tree.clone().unwrap_or_else(|| HashTreeBin::treeify(Vec::new())))
                } else {
                    HashBin::Tree(HashTreeBin::treeify(nodes))
                };
            }
        }
        self.table = next;
        self.threshold = self.table.len() * 3 / 4;
    }

    /// Keys in iteration order.
    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.table.iter().flat_map(|bin| -> Box<dyn Iterator<Item = &K> + '_> {
            match bin {
                HashBin::List(nodes) => Box::new(nodes.iter().map(|(_, k)| k)),
                HashBin::Tree(tree) => Box::new(tree.iter()),
            }
        })
    }
}

/// A `HashMap` tree bin (`HashMap.TreeNode`s): a red-black tree ordered by hash, then `compareTo`, whose
/// `next` list is the iteration order.
#[derive(Debug, Clone)]
struct HashTreeBin<K> {
    nodes: Vec<TreeNode<K>>,
    root: usize,
    /// Node indices in `next` order.
    order: Vec<usize>,
}

#[derive(Debug, Clone)]
struct TreeNode<K> {
    hash: i32,
    key: K,
    parent: Option<usize>,
    left: Option<usize>,
    right: Option<usize>,
    red: bool,
}

impl<K: JavaHash> HashTreeBin<K> {
    /// `TreeNode.treeify`: inserts the list's nodes in order (the `next` order stays the list's), then moves the
    /// root to the front.
    fn treeify(list: Vec<(i32, K)>) -> Self {
        let mut t = HashTreeBin { nodes: Vec::new(), root: 0, order: (0..list.len()).collect() };
        for (i, (hash, key)) in list.into_iter().enumerate() {
            t.nodes.push(TreeNode { hash, key, parent: None, left: None, right: None, red: false });
            if i > 0 {
                let (parent, left) = t.find_slot(i);
                t.attach(i, parent, left);
            }
        }
        t.move_root_to_front();
        t
    }

    /// `putTreeVal`: false when the key is there; otherwise the new node goes right after its parent in the
    /// `next` order.
    fn put(&mut self, hash: i32, key: K) -> bool {
        if self.nodes.iter().any(|n| n.key == key) {
            return false;
        }
        let x = self.nodes.len();
        self.nodes.push(TreeNode { hash, key, parent: None, left: None, right: None, red: false });
        let (parent, left) = self.find_slot(x);
        let at = self.order.iter().position(|&i| i == parent).map_or(self.order.len(), |p| p + 1);
        self.order.insert(at, x);
        self.attach(x, parent, left);
        self.move_root_to_front();
        true
    }

    /// Where node `x` goes: (parent, as its left child?). Ties never happen between distinct keys of one type
    /// (hash, then `compareTo`).
    fn find_slot(&self, x: usize) -> (usize, bool) {
        let mut p = self.root;
        loop {
            let (n, node) = (&self.nodes[x], &self.nodes[p]);
            let dir = match node.hash.cmp(&n.hash) {
                std::cmp::Ordering::Greater => std::cmp::Ordering::Less,
                std::cmp::Ordering::Less => std::cmp::Ordering::Greater,
                std::cmp::Ordering::Equal => n.key.java_cmp(&node.key),
            };
            let left = dir != std::cmp::Ordering::Greater;
            match if left { node.left } else { node.right } {
                Some(child) => p = child,
                None => return (p, left),
            }
        }
    }

    fn attach(&mut self, x: usize, parent: usize, left: bool) {
        self.nodes[x].parent = Some(parent);
        if left {
            self.nodes[parent].left = Some(x);
        } else {
            self.nodes[parent].right = Some(x);
        }
        self.balance_insertion(x);
    }

    fn move_root_to_front(&mut self) {
        if let Some(p) = self.order.iter().position(|&i| i == self.root) {
            let r = self.order.remove(p);
            self.order.insert(0, r);
        }
    }

    /// `TreeNode.balanceInsertion`.
    fn balance_insertion(&mut self, mut x: usize) {
        self.nodes[x].red = true;
        loop {
            let Some(xp) = self.nodes[x].parent else {
                self.nodes[x].red = false;
                self.root = x;
                return;
            };
            let Some(xpp) = self.nodes[xp].parent.filter(|_| self.nodes[xp].red) else { return };
            if self.nodes[xpp].left == Some(xp) {
                match self.nodes[xpp].right.filter(|&u| self.nodes[u].red) {
                    Some(uncle) => {
                        self.nodes[uncle].red = false;
                        self.nodes[xp].red = false;
                        self.nodes[xpp].red = true;
                        x = xpp;
                    }
                    None => {
                        let mut xp = xp;
                        let mut xpp = Some(xpp);
                        if self.nodes[xp].right == Some(x) {
                            x = xp;
                            self.rotate_left(x);
                            xp = match self.nodes[x].parent {
                                Some(p) => p,
                                None => return,
                            };
                            xpp = self.nodes[xp].parent;
                        }
                        self.nodes[xp].red = false;
                        if let Some(g) = xpp {
                            self.nodes[g].red = true;
                            self.rotate_right(g);
                        }
                    }
                }
            } else {
                match self.nodes[xpp].left.filter(|&u| self.nodes[u].red) {
                    Some(uncle) => {
                        self.nodes[uncle].red = false;
                        self.nodes[xp].red = false;
                        self.nodes[xpp].red = true;
                        x = xpp;
                    }
                    None => {
                        let mut xp = xp;
                        let mut xpp = Some(xpp);
                        if self.nodes[xp].left == Some(x) {
                            x = xp;
                            self.rotate_right(x);
                            xp = match self.nodes[x].parent {
                                Some(p) => p,
                                None => return,
                            };
                            xpp = self.nodes[xp].parent;
                        }
                        self.nodes[xp].red = false;
                        if let Some(g) = xpp {
                            self.nodes[g].red = true;
                            self.rotate_left(g);
                        }
                    }
                }
            }
        }
    }

    fn rotate_left(&mut self, p: usize) {
        let Some(r) = self.nodes[p].right else { return };
        let rl = self.nodes[r].left;
        self.nodes[p].right = rl;
        if let Some(rl) = rl {
            self.nodes[rl].parent = Some(p);
        }
        let pp = self.nodes[p].parent;
        self.nodes[r].parent = pp;
        match pp {
            None => {
                self.root = r;
                self.nodes[r].red = false;
            }
            Some(pp) if self.nodes[pp].left == Some(p) => self.nodes[pp].left = Some(r),
            Some(pp) => self.nodes[pp].right = Some(r),
        }
        self.nodes[r].left = Some(p);
        self.nodes[p].parent = Some(r);
    }

    fn rotate_right(&mut self, p: usize) {
        let Some(l) = self.nodes[p].left else { return };
        let lr = self.nodes[l].right;
        self.nodes[p].left = lr;
        if let Some(lr) = lr {
            self.nodes[lr].parent = Some(p);
        }
        let pp = self.nodes[p].parent;
        self.nodes[l].parent = pp;
        match pp {
            None => {
                self.root = l;
                self.nodes[l].red = false;
            }
            Some(pp) if self.nodes[pp].right == Some(p) => self.nodes[pp].right = Some(l),
            Some(pp) => self.nodes[pp].left = Some(l),
        }
        self.nodes[l].right = Some(p);
        self.nodes[p].parent = Some(l);
    }

    fn iter(&self) -> impl Iterator<Item = &K> {
        self.order.iter().map(|&i| &self.nodes[i].key)
    }

    fn into_nodes(self) -> Vec<(i32, K)> {
        let mut slots: Vec<Option<TreeNode<K>>> = self.nodes.into_iter().map(Some).collect();
        self.order.iter().filter_map(|&i| slots[i].take()).map(|n| (n.hash, n.key)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_vectors_16_4() {
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("TagA"), 2598919);
        assert_eq!(string_hash("TagA||TagB"), 1789476431);
        assert_eq!(string_hash("标签"), 857175);
        assert_eq!(string_hash("😀"), 1772899);
        assert_eq!(string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(string_hash("TopicTest#KEY1"), -1656969516);
        assert_eq!(string_hash("TopicTest#ogaQmc"), i32::MIN);
        assert_eq!(string_hash("TopicTest#order1"), -2137216219);
        assert_eq!(string_hash("TopicTest#order2"), -2137216218);
        assert_eq!(string_hash("TopicTest#C0A80001A1B218B4AAC2000000000000"), -2044268817);
    }

    #[test]
    fn malformed_utf8_follows_java() {
        assert_eq!(utf8_bytes_hash(&[0xC3, 0x28]), 2031563);
        assert_eq!(utf8_bytes_hash(&[0xED, 0xA0, 0x80]), 65533);
        assert_eq!(utf8_bytes_hash(&[0x80, 0x80]), 2097056);
        let count = |b: &[u8]| decode_utf8_lossy(b).chars().filter(|&c| c == '\u{FFFD}').count();
        // Identical to maximal subpart (verified on JDK 17).
        for (bytes, n) in [
            (&[0xC3, 0x28][..], 1),
            (&[0xE2, 0x82], 1),
            (&[0xE2, 0x82, 0x28], 1),
            (&[0xF0, 0x90, 0x8C], 1),
            (&[0xC0, 0xAF], 2),
            (&[0xFF], 1),
            (&[0xF4, 0x90, 0x80, 0x80], 4),
            (&[0xE0, 0x80, 0x8F], 3),
            (&[0x80, 0x80], 2),
            (&[0xF4, 0x90], 2),
            (&[0xF0, 0x80], 2),
            (&[0xE0, 0xA0], 1),
            (&[0xC2], 1),
            (&[0xF8], 1),
            (&[0xED, 0x9F, 0xBF], 0),
        ] {
            assert_eq!(count(bytes), n, "{bytes:02X?}");
        }
        // Different from maximal subpart: surrogates.
        for bytes in [&[0xED, 0xA0, 0x80][..], &[0xED, 0xBF, 0xBF], &[0xED, 0xB0, 0x80], &[0xED, 0xA0], &[0xED, 0xBF]] {
            assert_eq!(decode_utf8_lossy(bytes), "\u{FFFD}", "{bytes:02X?}");
        }
        assert_eq!(decode_utf8_lossy(&[0xED, 0xA0, 0x41]), "\u{FFFD}A");
    }

    #[test]
    fn split_and_parse() {
        assert_eq!(split_java("a b  ", ' '), vec!["a", "b"]);
        assert_eq!(split_java(" a", ' '), vec!["", "a"]);
        assert_eq!(split_java("", ' '), vec![""]);
        assert_eq!(split_java("  ", ' '), Vec::<&str>::new());
        assert_eq!(parse_int("+3"), Some(3));
        assert_eq!(parse_int("-3"), Some(-3));
        assert_eq!(parse_int(" 3"), None);
        assert_eq!(parse_int("abc"), None);
        assert_eq!(parse_int("2147483648"), None);
    }

    #[test]
    fn concurrent_hash_map_order() {
        // A fresh ConcurrentHashMap(32) has 64 bins: 2147483647 spreads to bin 0, after 0 when put after it.
        let mut m = ConcurrentHashMapOrder::with_capacity(32);
        for q in [5, 0, i32::MAX, 64, 1] {
            assert!(m.put(q));
        }
        assert!(!m.put(0));
        assert_eq!(m.iter().copied().collect::<Vec<_>>(), [0, i32::MAX, 64, 1, 5]);
        // Growth at 3/4 of the bins (48 of 64) splits bin 0 [0, MAX, 64, 128] by bit 64 with lastRun = [128]:
        // lo [MAX, 0, 128] (the nodes before lastRun reversed), hi [64].
        for q in 100..143 {
            m.put(q);
        }
        assert_eq!(m.len(), 48);
        let order: Vec<i32> = m.iter().copied().collect();
        assert_eq!(&order[..4], [i32::MAX, 0, 128, 1]);
        assert!(m.remove(&0) && !m.remove(&0) && m.len() == 47);
        // The broker's offsetTable, ConcurrentHashMap(512), has 1024 bins until 768 keys.
        let mut t: ConcurrentHashMapOrder<String> = ConcurrentHashMapOrder::with_capacity(512);
        t.put("a".into());
        assert_eq!(t.table.len(), 1024);
    }

    #[test]
    fn list_split_reverses_the_nodes_before_the_last_run() {
        // Hashes with bit 16 set (hi) or not (lo): lo1 hi1 lo2 hi2 hi3 -> lastRun = hi2; lo: [lo2, lo1]; hi: [hi1, hi2, hi3].
        let nodes: Vec<(u32, &str)> = vec![(0, "lo1"), (16, "hi1"), (32, "lo2"), (48, "hi2"), (16 + 64, "hi3")];
        let (lo, hi) = split_list(nodes, 16);
        assert_eq!(lo.nodes.iter().map(|n| n.1).collect::<Vec<_>>(), ["lo2", "lo1"]);
        assert_eq!(hi.nodes.iter().map(|n| n.1).collect::<Vec<_>>(), ["hi1", "hi2", "hi3"]);
    }

    #[test]
    fn hash_map_order() {
        // "Orders" and "T\"x\u{e9}\n" in RocketMQ 5.3.1's groupTopicMap for G2 (tests/data): Orders first.
        let mut set = HashMapOrder::with_capacity(8);
        set.put("T\"x\u{e9}\n");
        set.put("Orders");
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), ["Orders", "T\"x\u{e9}\n"]);
        let mut m = HashMapOrder::with_capacity(128);
        for i in 0..97 {
            m.put(i);
        }
        assert_eq!(m.table.len(), 256);
        // Nine keys in one bin of 64: a tree bin. Keys 0, 64, ..., 512 (hash = value): the tree's root goes first,
        // then the list order with each new node after its parent.
        let mut t = HashMapOrder::with_capacity(64);
        for k in (0..9).map(|i| i * 64) {
            t.put(k);
        }
        assert!(matches!(t.table[0], HashBin::Tree(_)));
        let order: Vec<i32> = t.iter().copied().collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..9).map(|i| i * 64).collect::<Vec<_>>());
        assert_eq!(order[0], 64 * 3, "the root of the red-black tree of 0..=8 inserted in order");
    }
}
