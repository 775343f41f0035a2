import Foundation
import Testing
import VaultSystem

@Suite struct PrivateFilesTests {
    @Test func makeFolderCreatesEveryLevelPrivate() throws {
        let scratch = Scratch()
        let deep = scratch.file("a/b/c")
        try PrivateFiles.makeFolder(deep)
        try PrivateFiles.makeFolder(deep)  // again: nothing to do
        #expect(scratch.mode(scratch.file("a")) == 0o700)
        #expect(scratch.mode(deep) == 0o700)
        try PrivateFiles.check(deep, isDirectory: true)
        _ = FileManager.default.createFile(atPath: scratch.file("f"), contents: Data())
        #expect(systemError { try PrivateFiles.makeFolder(scratch.file("f/g")) }?.isNotDirectory == true)
    }

    @Test func checkDistinguishesEveryProblem() throws {
        let scratch = Scratch()
        let file = scratch.file("secret")
        try AtomicFile.write([1], to: file)
        try PrivateFiles.check(file, isDirectory: false)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
        #expect(throws: PrivateFileError.notPrivate(path: file, isDirectory: false, permissions: 0o644)) {
            try PrivateFiles.check(file, isDirectory: false)
        }
        #expect(throws: PrivateFileError.wrongKind(path: file, expectedDirectory: true)) {
            try PrivateFiles.check(file, isDirectory: true)
        }
        let link = scratch.file("link")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
        #expect(throws: PrivateFileError.symbolicLink(path: link, isDirectory: false)) {
            try PrivateFiles.check(link, isDirectory: false)
        }
        do {
            try PrivateFiles.check(scratch.file("missing"), isDirectory: false)
            Issue.record("a missing file passed")
        } catch {
            #expect(error.isNotFound && !error.isInsecure)
        }
        // Root owns /: not ours (the tests do not run as root).
        if ProcessIdentity.effectiveUID != 0 {
            #expect(throws: PrivateFileError.foreignOwner(path: "/", isDirectory: true, owner: 0)) {
                try PrivateFiles.check("/", isDirectory: true)
            }
        }
        #expect(PrivateFileError.notPrivate(path: file, isDirectory: false, permissions: 0o644).isInsecure)
    }

    @Test func readRefusesALinkAndAnOpenFile() throws {
        let scratch = Scratch()
        let file = scratch.file("secret")
        try AtomicFile.write(Array("hush".utf8), to: file)
        #expect(try PrivateFiles.read(file, limit: 100) == Array("hush".utf8))
        let link = scratch.file("link")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
        #expect(throws: PrivateFileError.symbolicLink(path: link, isDirectory: false)) {
            _ = try PrivateFiles.read(link, limit: 100)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: file)
        #expect(throws: PrivateFileError.notPrivate(path: file, isDirectory: false, permissions: 0o640)) {
            _ = try PrivateFiles.read(file, limit: 100)
        }
    }

    @Test func atomicWriteReplacesTheFileAndLeavesNoTemporary() throws {
        let scratch = Scratch()
        let target = scratch.file("state.json")
        try AtomicFile.write(Array("one".utf8), to: target)
        // A reader holding the old file keeps the old content: the name was swapped, not rewritten.
        let old = try FileDescriptor.open(target, .readOnly)
        try AtomicFile.write(Array("two, longer".utf8), to: target)
        let before = try old.readAll(limit: 100)
        let after = try FileDescriptor.open(target, .readOnly).readAll(limit: 100)
        #expect(before == Array("one".utf8))
        #expect(after == Array("two, longer".utf8))
        #expect(scratch.mode(target) == 0o600)
        #expect(scratch.entries == ["state.json"])
    }

    @Test func exclusiveWriteKeepsTheFirstWriter() throws {
        let scratch = Scratch()
        let target = scratch.file("secret")
        #expect(try AtomicFile.write([1], to: target, exclusive: true))
        #expect(try !AtomicFile.write([2], to: target, exclusive: true))
        let content = try FileDescriptor.open(target, .readOnly).readAll(limit: 10)
        #expect(content == [1])
        #expect(scratch.entries == ["secret"])
    }

    @Test func aFailedWriteLeavesNothingBehind() throws {
        let scratch = Scratch()
        let folder = scratch.file("ro")
        try PrivateFiles.makeFolder(folder)
        try AtomicFile.write([1], to: folder + "/kept")
        try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: folder)
        defer { _ = try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder) }
        if ProcessIdentity.effectiveUID != 0 {
            let error = systemError { try AtomicFile.write([2], to: folder + "/kept") }
            #expect(error?.isPermissionDenied == true)
            #expect(error?.path == folder + "/kept")
            #expect((try? FileManager.default.contentsOfDirectory(atPath: folder)) == ["kept"])
        }
        // Renaming onto a folder fails after the temporary file was written: it is removed.
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: folder)
        try PrivateFiles.makeFolder(folder + "/sub")
        _ = FileManager.default.createFile(atPath: folder + "/sub/x", contents: Data())
        let error = systemError { try AtomicFile.write([3], to: folder + "/sub") }
        #expect(error?.call == "rename")
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []) == ["kept", "sub"])
    }
}
