import Foundation
import Testing
import VaultKit

@Suite struct PromptAnswererTests {
    func answerer(hasUsername: Bool = true, user: String = PromptAnswerer.defaultUserPattern,
                  password: String = PromptAnswerer.defaultPasswordPattern) throws -> PromptAnswerer {
        PromptAnswerer(userPrompt: try PromptAnswerer.compile(user, option: "--user-prompt"),
                       passwordPrompt: try PromptAnswerer.compile(password, option: "--password-prompt"),
                       hasUsername: hasUsername)
    }

    @Test func aLoginSessionLikeLogin1() throws {
        var a = try answerer()
        #expect(a.programWrote(Array("Welcome\r\nlogin: ".utf8), echoOn: true, now: 0) == .username)
        // The echo of the typed name, then the password prompt, still with echo on: wait.
        #expect(a.programWrote(Array("alice\r\n".utf8), echoOn: true, now: 0.1) == .nothing)
        #expect(a.programWrote(Array("Password: ".utf8), echoOn: true, now: 0.2) == .nothing)
        #expect(a.isWaitingForEchoOff && !a.isPasswordSettled)
        #expect(a.tick(echoOn: true, now: 0.5) == .nothing)
        #expect(a.tick(echoOn: false, now: 0.6) == .password)
        #expect(a.isPasswordSettled && !a.isWaitingForEchoOff)
        // Never twice.
        #expect(a.programWrote(Array("\r\nlogin: Password: ".utf8), echoOn: false, now: 1) == .nothing)
        #expect(a.tick(echoOn: false, now: 2) == .nothing)
    }

    @Test func aPromptSplitAcrossReadsStillMatches() throws {
        var a = try answerer()
        #expect(a.programWrote(Array("log".utf8), echoOn: true, now: 0) == .nothing)
        #expect(a.programWrote(Array("in: ".utf8), echoOn: true, now: 0) == .username)
        #expect(a.programWrote(Array("bob\r\nPass".utf8), echoOn: false, now: 0) == .nothing)
        #expect(a.programWrote(Array("word: ".utf8), echoOn: false, now: 0) == .password)
    }

    @Test func echoLeftOnGivesUpAfterTheGrace() throws {
        var a = try answerer()
        #expect(a.programWrote(Array("Password: ".utf8), echoOn: true, now: 10) == .nothing)
        #expect(a.tick(echoOn: true, now: 12.9) == .nothing)
        #expect(a.tick(echoOn: true, now: 13.1) == .gaveUp)
        #expect(a.isPasswordSettled)
        // Echo going off later changes nothing: the answer was given.
        #expect(a.tick(echoOn: false, now: 14) == .nothing)
        #expect(a.programWrote(Array("\nPassword: ".utf8), echoOn: false, now: 15) == .nothing)
    }

    @Test func echoAlreadyOffAtThePromptTypesAtOnce() throws {
        var a = try answerer()
        #expect(a.programWrote(Array("Enter passphrase for key '/k': ".utf8), echoOn: false, now: 0) == .password)
    }

    @Test func noPromptEverMatchedTypesNothing() throws {
        var a = try answerer()
        for (i, line) in ["starting\n", "login successful\n", "password accepted\n", "done: 3 files\n"].enumerated() {
            #expect(a.programWrote(Array(line.utf8), echoOn: Bool.random(), now: Double(i)) == .nothing)
            #expect(a.tick(echoOn: false, now: Double(i) + 0.5) == .nothing)
        }
        #expect(!a.isPasswordSettled && !a.isWaitingForEchoOff)
    }

    @Test func withoutAUsernameItsPromptIsPassedOver() throws {
        var a = try answerer(hasUsername: false)
        #expect(a.programWrote(Array("login: ".utf8), echoOn: true, now: 0) == .nothing)
        #expect(a.programWrote(Array("\nPassword: ".utf8), echoOn: false, now: 0) == .password)
    }

    @Test func onlyOutputSinceTheLastAnswerCounts() throws {
        // Both patterns match "code: ": the one prompt is answered once, with the username; the
        // password waits for a prompt that comes after that answer.
        var a = try answerer(user: "code: $", password: "code: $")
        #expect(a.programWrote(Array("code: ".utf8), echoOn: false, now: 0) == .username)
        #expect(a.tick(echoOn: false, now: 1) == .nothing)
        #expect(a.programWrote(Array("carol\r\n".utf8), echoOn: false, now: 1) == .nothing)
        #expect(a.programWrote(Array("code: ".utf8), echoOn: false, now: 2) == .password)
    }

    @Test func customPatternsReplaceTheDefaults() throws {
        var a = try answerer(user: "benutzer> $", password: "kennwort> $")
        #expect(a.programWrote(Array("login: ".utf8), echoOn: true, now: 0) == .nothing)
        #expect(a.programWrote(Array("\nBENUTZER> ".utf8), echoOn: true, now: 0) == .username)
        #expect(a.programWrote(Array("alice\nPassword: ".utf8), echoOn: false, now: 0) == .nothing)
        #expect(a.programWrote(Array("\nKennwort> ".utf8), echoOn: false, now: 0) == .password)
        #expect(throws: VaultError.usage("--password-prompt: '(' is not a regular expression")) {
            _ = try PromptAnswerer.compile("(", option: "--password-prompt")
        }
    }

    @Test func aPromptNotAtTheEndOfTheOutputWaits() throws {
        var a = try answerer()
        #expect(a.programWrote(Array("Password: please wait\n".utf8), echoOn: false, now: 0) == .nothing)
    }

    @Test func nothingIsTypedOnceTheProgramWentRaw() throws {
        // An ssh session that logged in by key, started a shell (raw terminal), then prints a
        // password question: it is not vault's to answer.
        var a = try answerer()
        #expect(a.programWrote(Array("Last login: Mon\r\n$ ".utf8), echoOn: false, now: 0) == .nothing)
        a.terminalWentRaw()
        #expect(a.isAuthenticationOver && a.isPasswordSettled)
        #expect(a.programWrote(Array("Please confirm your password: ".utf8), echoOn: false, now: 1) == .nothing)
        #expect(a.tick(echoOn: false, now: 2) == .nothing)
        #expect(!a.typedAnything)
    }

    @Test func aRawTerminalAfterThePromptStillGetsThePassword() throws {
        // A program reading its password in raw mode after printing the prompt.
        var a = try answerer(hasUsername: false)
        #expect(a.programWrote(Array("Password: ".utf8), echoOn: false, now: 0) == .password)
        a.terminalWentRaw()
        #expect(a.typedAnything)
    }

    @Test func promptsLongAfterTheStartAreNotAnswered() throws {
        var a = try answerer()
        #expect(a.programWrote(Array("connecting...\r\n".utf8), echoOn: true, now: 100) == .nothing)
        #expect(a.programWrote(Array("Password: ".utf8), echoOn: false, now: 100 + PromptAnswerer.defaultAuthenticationWindow + 1) == .nothing)
        #expect(a.isAuthenticationOver && !a.typedAnything)
    }

}
