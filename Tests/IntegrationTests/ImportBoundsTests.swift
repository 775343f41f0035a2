import Foundation
import Testing

/// Hostile exports, built in each test, of a few megabytes that inflate to gigabytes (a zip member,
/// a gzip'd or gpg-compressed file, an XML of entities or of one tag's attributes, a row of many
/// columns) or that hold one field of hundreds of megabytes: every importer refuses them with an
/// error naming the bound it kept, with the import's peak resident memory under 200 MB (measured
/// by GNU time around the `vault` process, which counts the children it waited for, gpg
/// included), and writes nothing. Two large honest exports (a KeePass XML with a 9 MB attachment,
/// a CSV note of 900 KB) still import.
@Suite struct ImportBoundsTests {
    let box = Sandbox()
    let pc = Sandbox.passcode
    /// What the tests allow an import's peak RSS (the base of the process is about 25 MB).
    static let ceilingMB = 200.0

    /// A vault holding one item, `keep`, which must be all it holds after each refused import.
    func vaultWithOneItem() {
        box.initVault()
        let r = box.vault(["add", "keep", "--password-stdin"], passcode: pc, stdin: "p\n")
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// Runs python3 `script` with the sandbox as its working folder and `Self.bombs` defined.
    func python(_ script: String) {
        let r = spawn("/usr/bin/python3", ["-c", "import os\nos.chdir(\(pyString(box.home)))\n" + Self.bombs + script], env: box.env)
        #expect(r.status == 0, "python3: \(r.stderr)")
    }

    /// `pux(path, first, fill, count, last)` writes a zip whose `export.data` is `first`, `count`
    /// times `fill`, `last`; `gz(...)` a gzip file of the same. `fill` is compressed once and its
    /// deflate blocks repeated (a full flush makes them byte-aligned and independent), so a GiB
    /// costs its CRC-32, not its compression: a fraction of a second.
    static let bombs = """
    import struct, zlib
    def deflated(first, fill, count, last):
        def segment(data, final):
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            return c.compress(data) + c.flush(zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH)
        crc = zlib.crc32(first)
        for _ in range(count): crc = zlib.crc32(fill, crc)
        crc = zlib.crc32(last, crc)
        size = len(first) + len(fill) * count + len(last)
        assert size < 1 << 32
        return segment(first, False) + segment(fill, False) * count + segment(last, True), crc, size
    def pux(path, first, fill, count, last):
        data, crc, size = deflated(first, fill, count, last)
        name = b'export.data'
        local = struct.pack('<IHHHHHIIIHH', 0x04034b50, 20, 0, 8, 0, 0x21, crc, len(data), size, len(name), 0) + name
        central = struct.pack('<IHHHHHHIIIHHHHHII', 0x02014b50, 20, 20, 0, 8, 0, 0x21, crc, len(data), size, len(name), 0, 0, 0, 0, 0, 0) + name
        end = struct.pack('<IHHHHIIH', 0x06054b50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
        open(path, 'wb').write(local + data + central + end)
    def gz(path, first, fill, count, last):
        data, crc, size = deflated(first, fill, count, last)
        open(path, 'wb').write(b'\\x1f\\x8b\\x08\\x00\\x00\\x00\\x00\\x00\\x00\\x03' + data + struct.pack('<II', crc, size))

    """

    func pyString(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "\\'") + "'" }

    /// `vault args` (with the passcode on fd 3) under GNU time: what it printed, and its peak
    /// resident memory in MB (GNU time forks its child, so the figure is the import's own, not
    /// this test process's).
    /// With `pipeFrom`, standard input is a pipe from `cat FILE` (no seeks).
    func measured(_ args: [String], pipeFrom: String? = nil, fds: [Int32: String] = [:]) throws -> (RunResult, Double) {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/time"), "GNU time is needed: apt-get install time")
        let report = box.home + "/rss-" + UUID().uuidString.prefix(8)
        var descriptors = fds
        descriptors[3] = pc + "\n"
        let command = ["/usr/bin/time", "-f", "%M", "-o", report, vaultBinary] + args + ["--passcode-fd", "3"]
        let r = pipeFrom.map { file in
            spawn("/bin/sh", ["-c", "cat \"$0\" | exec \"$@\"", file] + command, env: box.env, fds: descriptors)
        } ?? spawn(command[0], Array(command.dropFirst()), env: box.env, fds: descriptors)
        let text = (try? String(contentsOfFile: report, encoding: .utf8)) ?? ""
        let kib = try #require(text.split(separator: "\n").last.flatMap { Int($0) }, "GNU time's report: \(text)")
        return (r, Double(kib) / 1024)
    }

    /// Imports `args`, expecting exit 2 with `words` on stderr, a peak under the ceiling and the
    /// vault as it was. Returns the peak in MB.
    @discardableResult
    func refusedWithin(_ args: [String], _ words: [String], status: Int32 = 2, pipeFrom: String? = nil, fds: [Int32: String] = [:],
                       sourceLocation: SourceLocation = #_sourceLocation) throws -> Double {
        let (r, peak) = try measured(["import"] + args, pipeFrom: pipeFrom, fds: fds)
        #expect(r.status == status && words.allSatisfy(r.stderr.contains), "\(args): \(r.status) \(r.stderr)", sourceLocation: sourceLocation)
        #expect(peak < Self.ceilingMB, "\(args): peak RSS \(peak) MB", sourceLocation: sourceLocation)
        #expect(box.vault(["ls"], passcode: pc).stdout == "keep\n", "\(args): nothing of a refused import was written", sourceLocation: sourceLocation)
        let input = args.last { $0.hasPrefix("/") || $0 == "-" } ?? args.joined(separator: " ")
        print("ImportBoundsTests: \(URL(fileURLWithPath: input).lastPathComponent) \(args.contains("--force") ? "(--force) " : ""): peak \(String(format: "%.1f", peak)) MB")
        return peak
    }

    /// 1PUX (2 MB or less each): an `export.data` that inflates to 2 GiB as one item's notes, or
    /// to 512 MiB of white space or of a value passed over; the first read from a pipe (no seeks).
    @Test func hostile1PUXArchives() throws {
        vaultWithOneItem()
        python("""
        M = 1 << 20
        head = b'{"accounts":[{"attrs":{"name":"a"},"vaults":[{"attrs":{"name":"v"},"items":['
        pux('notes.1pux', head + b'{"overview":{"title":"t"},"details":{"notesPlain":"', b'A' * (8 * M), 256, b'"}}]}]}]}')
        pux('space.1pux', head, b' ' * (8 * M), 64, b']}]}]}')
        pux('skipped.1pux', b'{"unknown":"', b'B' * (8 * M), 64, b'","accounts":[]}')
        """)
        for name in ["notes", "space", "skipped"] {
            let size = (try FileManager.default.attributesOfItem(atPath: box.home + "/\(name).1pux")[.size] as? Int) ?? 0
            #expect(size < 3 << 20, "\(name).1pux is a few MB (\(size) bytes)")
        }
        try refusedWithin([box.home + "/notes.1pux"], ["entry 1 is larger than 1 MiB"])
        try refusedWithin([box.home + "/space.1pux"], ["'export.data' in the archive inflates to more than 256 MiB"])
        try refusedWithin([box.home + "/skipped.1pux"], ["inflates to more than 256 MiB"])
        try refusedWithin(["--from", "1pux", "-"], ["entry 1 is larger than 1 MiB"], pipeFrom: box.home + "/notes.1pux")
    }

    /// A 1PUX of 256 MiB of tiny valid items (0.3 MB): what the items would hold is bounded, not
    /// only their text (each costs far more decoded than its 40 bytes).
    @Test func aPUXOfTinyItemsIsBoundedByWhatItsItemsHold() throws {
        vaultWithOneItem()
        python("""
        M = 1 << 20
        item = b'{"overview":{"title":"t"},"details":{}},'
        pux('items.1pux', b'{"accounts":[{"vaults":[{"items":[', item * (M // len(item)), 256, item[:-1] + b']}]}]}')
        """)
        try refusedWithin([box.home + "/items.1pux"], ["the import holds more than 128 MiB of items"])
    }

    /// KeePass XML: gzip'd (2 GiB inside: libxml2 is never asked to inflate it), a billion laughs
    /// (a document type is refused before any entity is expanded), one tag of 500,000 attributes
    /// (4 MB; libxml2 would compare them pairwise and hold them all), one entry of 200,000 strings,
    /// and a 300 MiB text node. An export whose `Meta` holds a 9 MB attachment still imports:
    /// what no item takes is passed over.
    @Test func hostileKeePassXML() throws {
        vaultWithOneItem()
        python("""
        M = 1 << 20
        entry = b'<?xml version="1.0"?>\\n<KeePassFile><Root><Group><Name>Root</Name><Entry><String><Key>Title</Key><Value>'
        tail = b'</Value></String></Entry></Group></Root></KeePassFile>\\n'
        gz('gz.xml', entry, b'C' * (8 * M), 256, tail)
        lol = b''.join(b'<!ENTITY %s "%s">' % (bytes([98 + i]), (b'&%s;' % bytes([97 + i])) * 10) for i in range(9))
        open('laughs.xml', 'wb').write(b'<?xml version="1.0"?>\\n<!DOCTYPE KeePassFile [<!ENTITY a "aaaaaaaaaa">' + lol
            + b']>\\n<KeePassFile><Root><Group><Entry><String><Key>Title</Key><Value>&j;</Value></String></Entry></Group></Root></KeePassFile>\\n')
        open('attributes.xml', 'wb').write(b'<?xml version="1.0"?>\\n<KeePassFile><Root><Group><Entry '
            + b' '.join(b'a%d="x"' % i for i in range(500000)) + b'/></Group></Root></KeePassFile>\\n')
        open('strings.xml', 'wb').write(b'<?xml version="1.0"?>\\n<KeePassFile><Root><Group><Name>Root</Name><Entry>'
            + b''.join(b'<String><Key>k%d</Key><Value>v</Value></String>' % i for i in range(200000)) + b'</Entry></Group></Root></KeePassFile>\\n')
        with open('text.xml', 'wb') as f:
            f.write(entry)
            for _ in range(300): f.write(b'D' * M)
            f.write(tail)
        with open('attachment.xml', 'wb') as f:
            f.write(b'<?xml version="1.0"?>\\n<KeePassFile><Meta><Binaries><Binary ID="0">' + b'QUJD' * (9 * M // 4)
                + b'</Binary></Binaries></Meta><Root><Group><Name>Root</Name><Entry><String><Key>Title</Key><Value>mail</Value></String>'
                + b'<String><Key>Password</Key><Value>pw</Value></String><Binary><Key>a.txt</Key><Value Ref="0"/></Binary></Entry></Group></Root></KeePassFile>\\n')
        """)
        try refusedWithin(["--from", "keepass-xml", box.home + "/gz.xml"], ["the KeePass XML cannot be read"])
        try refusedWithin([box.home + "/laughs.xml"], ["document type"])
        try refusedWithin([box.home + "/attributes.xml"], ["line 2: a tag is longer than 64 KiB"])
        try refusedWithin([box.home + "/strings.xml"], ["entry 1 is larger than 1 MiB"])
        // libxml2 (without XML_PARSE_HUGE) ends a text node at 10 MB, before vault sees it.
        try refusedWithin([box.home + "/text.xml"], ["line 2: the KeePass XML cannot be read"])
        let (r, peak) = try measured(["import", box.home + "/attachment.xml"])
        #expect(r.status == 0 && r.stderr.contains("not kept: 1 attachments"), "\(r.stderr)")
        #expect(peak < Self.ceilingMB, "peak RSS \(peak) MB")
        #expect(box.vault(["get", "mail", "--field", "password"], passcode: pc).stdout == "pw\n")
    }

    /// CSV (every CSV format reads through one reader): a 300 MiB field, in each format; a row of
    /// 100,000 one-byte columns (200 KB of text, far more as an item). A note of 900 KB imports.
    @Test func hostileCSV() throws {
        vaultWithOneItem()
        python("""
        M = 1 << 20
        heads = {'chrome': b'name,url,username,password', 'firefox': b'url,username,password,httpRealm,formActionOrigin,guid,timeCreated,timeLastUsed,timePasswordChanged',
                 'keepassxc': b'Group,Title,Username,Password,URL,Notes', '1password': b'Title,Url,Username,Password', 'bitwarden': b'type,name,login_uri,login_username,login_password'}
        for name, head in heads.items():
            with open(name + '.csv', 'wb') as f:
                f.write(head + b'\\n"')
                for _ in range(300 if name == 'chrome' else 8): f.write(b'B' * M)
                f.write(b'"' + b',' * head.count(b',') + b'\\n')
        cols = 100000
        open('columns.csv', 'wb').write(b'name,url,username,password,' + b','.join(b'c%d' % i for i in range(cols)) + b'\\n'
            + b'x,u,u,p,' + b','.join([b'v'] * cols) + b'\\n')
        open('note.csv', 'wb').write(b'name,url,username,password,note\\nbig,https://x,u,p,' + b'N' * (900 * 1024) + b'\\n')
        """)
        try refusedWithin(["--from", "chrome-csv", box.home + "/chrome.csv"], ["line 2 is larger than 1 MiB"])
        for format in ["firefox", "keepassxc", "1password", "bitwarden"] {
            try refusedWithin(["--from", "\(format)-csv", box.home + "/\(format).csv"], ["line 2 is larger than 1 MiB"])
        }
        try refusedWithin([box.home + "/columns.csv"], ["line 2 is larger than 1 MiB"])
        let (r, peak) = try measured(["import", box.home + "/note.csv"])
        #expect(r.status == 0 && peak < Self.ceilingMB, "\(r.stderr) \(peak) MB")
        #expect(box.vault(["get", "big", "--field", "notes"], passcode: pc).stdout.count == 900 * 1024 + 1)
    }

    /// vault's own JSON (streamed, and collected with --force), Bitwarden JSON, and an encrypted
    /// export's text form (refused at a line longer than any it writes, before it is held).
    @Test func hostileJSONAndEncrypted() throws {
        vaultWithOneItem()
        python("""
        M = 1 << 20
        with open('vault.json', 'wb') as f:
            f.write(b'[{"name":"n","notes":"')
            for _ in range(300): f.write(b'E' * M)
            f.write(b'"}]')
        with open('bitwarden.json', 'wb') as f:
            f.write(b'{"encrypted":false,"items":[{"type":2,"name":"n","fields":[')
            f.write(b','.join([b'{"name":"f","value":"v","type":0}'] * 25000))
            f.write(b']}]}')
        with open('armored.txt', 'wb') as f:
            f.write(b'-----BEGIN VAULT ENCRYPTED EXPORT-----\\n')
            for _ in range(300): f.write(b'QUJD' * (M // 4))
        """)
        try refusedWithin([box.home + "/vault.json"], ["item 1 is larger than 1 MiB"])
        try refusedWithin(["--force", box.home + "/vault.json"], ["item 1 is larger than 1 MiB"])
        // 25,000 fields: 825 KB of text, about 225,000 values (JSONSerialization's objects for
        // them would be hundreds of megabytes).
        try refusedWithin([box.home + "/bitwarden.json"], ["entry 1 (line 1) holds more than 20000 JSON values"])
        try refusedWithin([box.home + "/armored.txt", "--passphrase-fd", "4"], ["a line longer than 64 KiB"], status: 5, fds: [4: "any pass phrase\n"])
    }

    /// A pass entry of 5 MB that gpg inflates to 1 GiB: gpg is stopped at 1 MiB of output.
    @Test func hostilePassEntry() throws {
        vaultWithOneItem()
        let gnupg = box.home + "/gnupg", store = box.home + "/store"
        try FileManager.default.createDirectory(atPath: gnupg, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        let env = box.env.merging(["GNUPGHOME": gnupg]) { _, b in b }
        var r = spawn("/usr/bin/gpg", ["--batch", "--passphrase", "", "--quick-gen-key", "bomb <bomb@vault.invalid>", "ed25519", "cert,sign", "never"], env: env)
        #expect(r.status == 0, "gpg key: \(r.stderr)")
        let fpr = spawn("/usr/bin/gpg", ["--batch", "--list-keys", "--with-colons"], env: env).stdout
            .split(separator: "\n").first { $0.hasPrefix("fpr:") }?.split(separator: ":", omittingEmptySubsequences: false)[9] ?? ""
        r = spawn("/usr/bin/gpg", ["--batch", "--passphrase", "", "--quick-add-key", String(fpr), "cv25519", "encr", "never"], env: env)
        #expect(r.status == 0, "gpg subkey: \(r.stderr)")
        _ = FileManager.default.createFile(atPath: store + "/.gpg-id", contents: Data((String(fpr) + "\n").utf8))
        r = spawn("/bin/sh", ["-c", "head -c 1073741824 /dev/zero | gpg --batch --yes --trust-model always -e -r \(fpr) --compress-algo zlib -z 1 -o '\(store)/bomb.gpg'"], env: env)
        #expect(r.status == 0, "gpg encrypt: \(r.stderr)")
        let size = (try FileManager.default.attributesOfItem(atPath: store + "/bomb.gpg")[.size] as? Int) ?? 0
        #expect(size < 10 << 20, "the pass entry is a few MB (\(size) bytes)")
        box.env["GNUPGHOME"] = gnupg
        try refusedWithin([store], ["entry 'bomb' (decrypted) is larger than 1 MiB"])
    }
}
