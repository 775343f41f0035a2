import Foundation
import Testing

/// tpm2-tss, Nettle, libarchive, libxml2 and SQLite are opened with dlopen by the command that needs
/// them (the passcode on a TPM, a one-time code, a 1PUX archive, a KeePass XML export, a database
/// opened: not in a session's `get`), not linked: the
/// `vault` binary does not name them and `get`, `ls` and the helpers never load them (checked with
/// libfprint's in ReaderProcessTests), and each is loaded (LD_DEBUG=libs reports a dlopen as it
/// does a link) when its command runs.
@Suite struct OnDemandLibraryTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    /// The libraries and what they pull in (libcrypto with tpm2-tss, ICU with libxml2, the
    /// compressors with libarchive).
    static let onDemand = ["libtss2", "libcrypto", "libnettle", "libarchive", "liblzma", "libzstd", "libxml2", "libicuuc", "libsqlite3"]

    init() {
        box.initVault()
        box.vault(["add", "db", "--username", "admin", "--password-stdin"], passcode: pc, stdin: "db-secret-9\n")
    }

    /// Each library is opened by the command that needs it, and the command works.
    @Test func eachIsOpenedByTheCommandThatNeedsIt() throws {
        let traced = box.env.merging(["LD_DEBUG": "libs"]) { $1 }
        func run(_ args: [String], stdin: String = "") -> RunResult {
            spawn(vaultBinary, args + ["--passcode-fd", "3"], env: traced, stdin: stdin, fds: [3: pc + "\n"])
        }
        // RFC 6238's SHA-1 secret ("12345678901234567890"): the code is checked by ImportTests;
        // here that it is made, and that making it opened Nettle.
        var r = run(["add", "t", "--totp-stdin"], stdin: "otpauth://totp/t?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ\n")
        #expect(r.status == 0, "\(r.stderr.suffix(300))")
        #expect(r.stderr.contains("libsqlite3.so.0"), "add without a session opened the database, and SQLite")
        #expect(!r.stderr.contains("libnettle"), "adding a TOTP secret makes no code")
        r = run(["otp", "t"])
        #expect(r.status == 0 && r.stdout.count == 7, "\(r.stdout) \(r.stderr.suffix(300))")
        #expect(r.stderr.contains("libnettle.so.8"), "vault otp opened Nettle")

        let xml = box.home + "/kp.xml"
        _ = FileManager.default.createFile(atPath: xml, contents: Data("""
            <?xml version="1.0" encoding="utf-8"?>
            <KeePassFile><Meta/><Root><Group><Name>Root</Name>
            <Entry><String><Key>Title</Key><Value>kx</Value></String><String><Key>UserName</Key><Value/></String>
            <String><Key>Password</Key><Value ProtectInMemory="True"> kx &amp; pass </Value></String></Entry>
            </Group></Root></KeePassFile>

            """.utf8))
        r = run(["import", "--from", "keepass-xml", xml])
        #expect(r.status == 0, "\(r.stderr.suffix(300))")
        #expect(r.stderr.contains("libxml2.so.2"), "the KeePass import opened libxml2")
        #expect(box.vault(["get", "kx", "--field", "password"], passcode: pc).stdout == " kx & pass \n",
                "entities and the spaces around a value are kept")

        let zip = box.home + "/bad.1pux"
        _ = FileManager.default.createFile(atPath: zip, contents: Data("PK\u{3}\u{4}garbage".utf8))
        r = run(["import", "--from", "1pux", zip])
        #expect(r.status == 2, "a damaged archive is refused: \(r.stderr.suffix(300))")
        #expect(r.stderr.contains("libarchive.so.13"), "the 1PUX import opened libarchive")
    }

    /// A library that cannot be used (here a stand-in `libsqlite3.so.0` without SQLite's functions,
    /// found first through LD_LIBRARY_PATH) is an error naming the missing function and the Debian
    /// package, exit 1, at the command that needs it; a command that does not is unaffected.
    @Test func aBrokenLibraryIsNamedWithThePackageToInstall() throws {
        guard let cc = ["/usr/bin/cc", "/usr/bin/gcc"].first(where: FileManager.default.isExecutableFile) else {
            print("OnDemandLibraryTests: SKIPPED the broken-library check: no C compiler (gcc)")
            return
        }
        let dir = box.home + "/fakelib"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dir + "/empty.c", contents: Data("int vault_not_sqlite;\n".utf8))
        let built = spawn(cc, ["-shared", "-fPIC", "-o", dir + "/libsqlite3.so.0", "-Wl,-soname,libsqlite3.so.0", dir + "/empty.c"],
                          env: ["PATH": "/usr/bin:/bin"])
        #expect(built.status == 0, "\(built.stderr)")
        let env = box.env.merging(["LD_LIBRARY_PATH": dir]) { $1 }
        let r = spawn(vaultBinary, ["ls", "--passcode-fd", "3"], env: env, fds: [3: pc + "\n"])
        #expect(r.status == 1, "\(r.status) \(r.stderr)")
        #expect(r.stderr.contains("SQLite cannot be loaded") && r.stderr.contains("sqlite3_open_v2"), "\(r.stderr)")
        #expect(r.stderr.contains("hint: install the Debian package libsqlite3-0"), "\(r.stderr)")
        #expect(spawn(vaultBinary, ["generate", "--length", "12"], env: env).status == 0, "generate opens no database")
    }

    /// A KeePass export has no document type: one with a DTD (an entity bomb, an external entity)
    /// is refused before any entity is read, and nothing is imported.
    @Test func aKeePassXMLWithADocumentTypeIsRefused() {
        let xml = box.home + "/dtd.xml"
        _ = FileManager.default.createFile(atPath: xml, contents: Data("""
            <?xml version="1.0"?>
            <!DOCTYPE KeePassFile [<!ENTITY x SYSTEM "file:///etc/passwd">]>
            <KeePassFile><Root><Group><Entry><String><Key>Title</Key><Value>&x;</Value></String></Entry></Group></Root></KeePassFile>

            """.utf8))
        let r = box.vault(["import", "--from", "keepass-xml", xml], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("document type"), "\(r.stderr)")
        #expect(box.vault(["ls"], passcode: pc).stdout == "db\n")
    }

    /// CXML2/shim.h repeats the libxml2 declarations vault calls (libxml2's headers are not on a
    /// system module's include path): the toolchain's clang checks them against the real headers.
    @Test func theRepeatedLibxml2DeclarationsMatchLibxml2sHeaders() throws {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        let clang = path.split(separator: ":").map { $0 + "/clang" }.first { FileManager.default.isExecutableFile(atPath: $0) }
        let header = "/usr/include/libxml2/libxml/xmlreader.h"
        guard let clang, FileManager.default.fileExists(atPath: header) else {
            print("OnDemandLibraryTests: SKIPPED the libxml2 declaration check: no clang on PATH or no \(header) (libxml2-dev)")
            return
        }
        let shim = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/CXML2/shim.h").path
        let check = box.home + "/check.c"
        _ = FileManager.default.createFile(atPath: check, contents: Data("""
            #include <libxml/xmlreader.h>
            /* The shim's opaque reader is libxml2's own struct here, so each field can be compared whole. */
            #define vault_xmlTextReader _xmlTextReader
            #include "\(shim)"
            #define SAME(name) _Static_assert(__builtin_types_compatible_p(__typeof__(((struct vault_xml2_api *)0)->name), \
                __typeof__(&name)), #name " differs from libxml2's declaration");
            SAME(xmlReaderForIO) SAME(xmlTextReaderRead) SAME(xmlTextReaderNodeType) SAME(xmlTextReaderIsEmptyElement)
            SAME(xmlTextReaderConstName) SAME(xmlTextReaderConstValue) SAME(xmlTextReaderMoveToAttribute)
            SAME(xmlTextReaderMoveToElement) SAME(xmlTextReaderGetParserLineNumber) SAME(xmlFreeTextReader)
            /* The error handler's severity is an enum there, an int here: the same size and passing. */
            _Static_assert(__builtin_types_compatible_p(__typeof__(&xmlTextReaderSetErrorHandler),
                void (*)(xmlTextReaderPtr, xmlTextReaderErrorFunc, void *)), "handler");
            _Static_assert(__builtin_types_compatible_p(xmlTextReaderErrorFunc,
                void (*)(void *, const char *, xmlParserSeverities, xmlTextReaderLocatorPtr)), "handler type");
            _Static_assert(sizeof(xmlParserSeverities) == sizeof(int) && sizeof(xmlChar) == sizeof(vault_xmlChar), "sizes");
            _Static_assert(XML_PARSE_NONET == VAULT_XML_PARSE_NONET && XML_PARSE_NOERROR == VAULT_XML_PARSE_NOERROR
                && XML_PARSE_NOWARNING == VAULT_XML_PARSE_NOWARNING, "options");
            _Static_assert(XML_READER_TYPE_ELEMENT == VAULT_XML_READER_ELEMENT && XML_READER_TYPE_TEXT == VAULT_XML_READER_TEXT
                && XML_READER_TYPE_CDATA == VAULT_XML_READER_CDATA && XML_READER_TYPE_DOCUMENT_TYPE == VAULT_XML_READER_DOCUMENT_TYPE
                && XML_READER_TYPE_WHITESPACE == VAULT_XML_READER_WHITESPACE
                && XML_READER_TYPE_SIGNIFICANT_WHITESPACE == VAULT_XML_READER_SIGNIFICANT_WHITESPACE
                && XML_READER_TYPE_END_ELEMENT == VAULT_XML_READER_END_ELEMENT, "node types");

            """.utf8))
        let r = spawn(clang, ["-fsyntax-only", "-Werror", "-I/usr/include/libxml2", check], env: ["PATH": path])
        #expect(r.status == 0, "CXML2/shim.h disagrees with libxml2's headers:\n\(r.stderr)")
    }
}
