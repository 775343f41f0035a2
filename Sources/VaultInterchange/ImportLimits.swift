public import VaultKit
/// The bounds every importer keeps, whatever its input: a crafted export (a zip whose member
/// inflates to gigabytes, one field of hundreds of megabytes, a row of a million columns, an XML
/// start tag of a million attributes) is refused with an error naming the bound, instead of
/// growing the process until the kernel kills it. Each reader takes its input as a stream and
/// holds one item's text at a time; what it keeps is counted by `size(of:)`.
public enum ImportLimits {
    /// One item: its text in the export (a JSON element, a CSV row, a KeePass entry's values, a
    /// decrypted pass entry) and its `size(of:)` once read, so any one field too (1 MiB). An item
    /// of vault's is at most a few kilobytes; the unlock session carries one of at most 4 MiB.
    public static let item = 1 << 20

    /// What an import holds before it writes anything, by `size(of:)` summed over its items
    /// (128 MiB: about 120,000 items of the usual size). Another manager's export, and vault's
    /// own JSON with `--force` or `--dry-run`, is read whole before the first write; vault's own
    /// JSON without them goes into the vault as it is read and holds one item.
    public static let held = 128 << 20

    /// The most values (keys and elements, counted at each `{`, `[`, `,` and `:`) one item's JSON
    /// in another manager's export may hold (20,000: an item of 1,000 custom fields holds about
    /// 8,000). Those readers build a tree of values per item (`JSONValue.plainObject`), each value
    /// a boxed `Any` of its own: the bound keeps one item's tree small whatever its text.
    public static let jsonValues = 20_000

    /// What one member of an archive (1PUX's `export.data`) may inflate to (256 MiB: a 1Password
    /// export of 100,000 items is about 100 MiB).
    public static let inflated = 256 << 20

    /// The longest XML tag, attributes included (64 KiB; KeePass writes tags of a few dozen bytes).
    /// libxml2 bounds a text node, a name and the nesting without `XML_PARSE_HUGE`, but not the
    /// number of attributes of one tag, which it compares pairwise.
    public static let xmlTag = 64 << 10

    /// What each item costs in `size(of:)` besides its text: the `Item` value, its entry in the
    /// import's name set and array.
    static let itemOverhead = 512
    /// What each string of an item costs besides its bytes: its slot and heap header.
    public static let valueOverhead = 64

    /// The memory an imported item is counted for: its strings' bytes (name, secrets, notes, URLs,
    /// tags, custom fields' names and values, former passwords), `valueOverhead` for each, and
    /// `itemOverhead`. An upper bound of what the decoded item occupies, so that `held` bounds
    /// the process and not only the text.
    public static func size(of item: Item) -> Int {
        var n = itemOverhead
        func count(_ s: String?) {
            if let s { n += s.utf8.count + valueOverhead }
        }
        count(item.name)
        count(item.username)
        count(item.password)
        count(item.notes)
        count(item.totp)
        count(item.origin)
        count(item.userPrompt)
        count(item.passwordPrompt)
        for s in item.urls { count(s) }
        for s in item.tags { count(s) }
        for f in item.fields {
            count(f.name)
            count(f.value)
        }
        for h in item.passwordHistory { count(h.password) }
        return n
    }

    /// A size in the unit the messages use ("1 MiB", "64 KiB").
    static func text(_ bytes: Int) -> String {
        bytes >= 1 << 20 ? "\(bytes >> 20) MiB" : "\(bytes >> 10) KiB"
    }

    /// The error for an item over `item`, named as its reader names it (`entry 3 ('x')`, `line 7`).
    public static func tooLarge(_ entry: String) -> VaultError {
        .usage("\(entry) is larger than \(text(item)), vault's limit for one item",
               hint: "vault keeps secrets and notes, not files: shorten it or leave it out of the export")
    }

    /// The error for `JSONValueTooLarge` at `entry`: over `item` bytes, or over `jsonValues`.
    static func tooLarge(_ entry: String, _ error: JSONValueTooLarge) -> VaultError {
        guard error.counted else { return tooLarge(entry) }
        return .usage("\(entry) holds more than \(error.limit) JSON values, vault's limit for one item",
                      hint: "an item of 1,000 custom fields holds about 8,000: this is not a password manager's item")
    }
}
