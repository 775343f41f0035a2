import Foundation
import VaultKit
import VaultSystem

/// What ended a stretch of serving the clipboard.
enum ServingEnd {
    /// The deadline passed and the selection is still ours.
    case deadline
    /// Another client took the selection (SelectionClear): it is theirs now, we touch nothing.
    case lost
}

/// The owner of the X11 CLIPBOARD selection for one copied value (ICCCM section 2): it answers
/// `TARGETS`, `TIMESTAMP`, the text targets and, while it holds a secret, the
/// `x-kde-passwordManagerHint` target with `secret`, which Klipper, CopyQ and other clipboard
/// managers read to keep the value out of their history.
final class ClipboardOwner {
    /// The most of the previous clipboard content kept to give back (as `vault clipboard-clear`).
    static let previousLimit = 1 << 20
    /// The target clipboard managers check, and the value that tells them to skip the content.
    static let hintTarget = "x-kde-passwordManagerHint"
    static let hintValue = Array("secret".utf8)

    private let x: XDisplay
    private let window: UInt32
    private let clipboard, targets, timestamp, utf8, string, text, plainUTF8, hint, incr, transfer, scratch: UInt32
    /// The server time ownership was taken (0 before): requests older than it are refused, and
    /// giving the selection up with it never takes it from a client that took it since.
    private var ownedSince: UInt32 = 0
    /// What the clipboard held before the value (empty: nothing to give back).
    private var previous: SecretBytes

    /// A window of our own on `x`, and the atoms the selection protocol uses.
    /// - Throws: ``XError`` when the server does not answer.
    init(_ x: XDisplay) throws(XError) {
        self.x = x
        window = try x.makeWindow()
        clipboard = try x.atom("CLIPBOARD")
        targets = try x.atom("TARGETS")
        timestamp = try x.atom("TIMESTAMP")
        utf8 = try x.atom("UTF8_STRING")
        string = 31      // XA_STRING
        text = try x.atom("TEXT")
        plainUTF8 = try x.atom("text/plain;charset=utf-8")
        hint = try x.atom(Self.hintTarget)
        incr = try x.atom("INCR")
        transfer = try x.atom("VAULT_CLIPBOARD_TRANSFER")
        scratch = try x.atom("VAULT_CLIPBOARD_SCRATCH")
        do { previous = try SecretBytes(zeroed: 0) } catch { throw .connection("out of guarded memory") }
    }

    /// Keeps the text the clipboard holds now, to give back when the secret is cleared: none
    /// when it holds nothing, no text, more than ``previousLimit`` bytes, a value another
    /// password manager (or an earlier `vault get --clip`) marked with the hint, or `value`
    /// itself (copied twice): a secret never comes back.
    /// - Throws: `CryptoError.outOfMemory` when guarded memory runs out.
    func keepPrevious(other value: borrowing SecretBytes) throws {
        guard var held = heldText() else { return }
        defer { wipe(&held.bytes) }
        let kept = try SecretBytes(copying: held.bytes)
        if !kept.isEqual(to: value) { previous = kept }
    }

    /// At the deadline, with the selection still ours: serves the previous text (without the
    /// hint) until another client takes the selection, or, when there was none, gives it up.
    /// - Throws: ``XError`` when the connection breaks.
    func restorePrevious() throws {
        if previous.count == 0 {
            try giveUp()
            return
        }
        _ = try serve(previous, secret: false, until: nil)
    }

    /// The clipboard's text unless it is marked secret; its owner gets 3 s in all to answer.
    private func heldText() -> PropertyValue? {
        guard (try? x.selectionOwner(clipboard)) ?? 0 != 0, let time = try? serverTime() else { return nil }
        let deadline = MonotonicClock.seconds() + 3
        var offered: Set<UInt32>?
        if var list = try? convert(to: targets, time: time, until: deadline, limit: 64 << 10), list.format == 32 {
            offered = Set(list.bytes.withUnsafeBytes { Array($0.bindMemory(to: UInt32.self)) })
            wipe(&list.bytes)
        }
        if let offered, offered.contains(hint) {
            guard var marked = try? convert(to: hint, time: time, until: deadline, limit: 64) else { return nil }
            defer { wipe(&marked.bytes) }
            if marked.bytes == Self.hintValue { return nil }
        }
        // An owner that does not list its targets may still give text.
        let target = offered.map { $0.contains(utf8) ? utf8 : $0.contains(string) ? string : 0 } ?? utf8
        guard target != 0, var held = try? convert(to: target, time: time, until: deadline, limit: Self.previousLimit) else {
            return nil
        }
        guard held.format == 8, !held.bytes.isEmpty else {
            wipe(&held.bytes)
            return nil
        }
        return held
    }

    /// Takes the CLIPBOARD selection.
    /// - Throws: ``XError`` when the server does not answer or another client holds it still.
    func take() throws(XError) {
        let time = try serverTime()
        try x.setSelectionOwner(window, of: clipboard, time: time)
        guard try x.selectionOwner(clipboard) == window else { throw .connection("another client kept the clipboard") }
        ownedSince = time
    }

    /// Gives the selection up (the clipboard is then empty), unless another client took it since.
    private func giveUp() throws(XError) {
        try x.setSelectionOwner(0, of: clipboard, time: ownedSince)
    }

    /// The largest value that can be served (one ChangeProperty; INCR is not offered).
    var largestValue: Int { x.maximumRequestBytes - 64 }

    /// Answers requests for the selection with `content` (and the hint when `secret`) until
    /// `deadline` (a `MonotonicClock` time; nil: until the selection is lost).
    /// - Throws: ``XError`` when the connection breaks (the X server went away).
    func serve(_ content: borrowing SecretBytes, secret: Bool, until deadline: Double?) throws -> ServingEnd {
        while true {
            guard let event = try x.nextEvent(until: deadline) else { return .deadline }
            switch event {
            case .selectionClear(let selection) where selection == clipboard:
                return .lost
            case .selectionRequest(let request):
                try answer(request, with: content, secret: secret)
            default:
                continue
            }
        }
    }

    /// Overwrites what libxcb and libc left of the value served: libxcb's output queue, and the
    /// stack below the caller (call it from the frame that called ``serve(_:secret:until:)``).
    func forgetServedBytes() {
        try? x.overwriteOutputQueue(scratch: scratch, of: window, type: string)
        XDisplay.overwriteStack()
    }

    private func answer(_ request: SelectionRequest, with content: borrowing SecretBytes, secret: Bool) throws {
        // ICCCM: a requestor that names no property (an obsolete client) gets the target's name.
        let property = request.property != 0 ? request.property : request.target
        let textTargets = [utf8, string, text, plainUTF8]
        var answered = false
        if request.selection == clipboard, request.time == 0 || request.time >= ownedSince {
            switch request.target {
            case targets:
                let list = [targets, timestamp] + textTargets + (secret ? [hint] : [])
                try list.withUnsafeBytes { try x.changeProperty(property, of: request.requestor, type: 4 /* ATOM */, format: 32, bytes: $0) }
                answered = true
            case timestamp:
                try [ownedSince].withUnsafeBytes { try x.changeProperty(property, of: request.requestor, type: 19 /* INTEGER */, format: 32, bytes: $0) }
                answered = true
            case let target where textTargets.contains(target) && content.count <= largestValue:
                // TEXT is answered as UTF8_STRING; each other target in its own type.
                let type = target == text ? utf8 : target
                try content.withUnsafeBytes { try x.changeProperty(property, of: request.requestor, type: type, format: 8, bytes: $0) }
                answered = true
            case hint where secret:
                try Self.hintValue.withUnsafeBytes { try x.changeProperty(property, of: request.requestor, type: hint, format: 8, bytes: $0) }
                answered = true
            default:
                break   // MULTIPLE, images, anything else: refused
            }
        }
        try x.notifySelection(request, property: answered ? property : 0)
    }

    /// The server's current time: a PropertyNotify for a no-op change of our own window.
    private func serverTime() throws(XError) -> UInt32 {
        try x.touchProperty(scratch, of: window, type: string)
        let deadline = MonotonicClock.seconds() + 5
        while let event = try x.nextEvent(until: deadline) {
            if case .propertyNotify(let w, let atom, let time, _) = event, w == window, atom == scratch { return time }
        }
        throw .connection("the X server did not answer within 5 s")
    }

    /// The selection converted to `target` by its owner, delivered into our window, whole or by
    /// INCR pieces; nil when the owner refuses, sends more than `limit` bytes or misses `deadline`.
    private func convert(to target: UInt32, time: UInt32, until deadline: Double, limit: Int) throws(XError) -> PropertyValue? {
        try x.convertSelection(clipboard, to: target, into: transfer, of: window, time: time)
        while let event = try x.nextEvent(until: deadline) {
            guard case .selectionNotify(let selection, let t, let property) = event, selection == clipboard, t == target else { continue }
            guard property != 0, let value = try x.property(transfer, of: window, delete: true, limit: limit) else { return nil }
            return value.type == incr ? try receivePieces(until: deadline, limit: limit) : value
        }
        return nil
    }

    /// The INCR protocol: deleting the property asked for the first piece; each new value is
    /// the next, until an empty one.
    private func receivePieces(until deadline: Double, limit: Int) throws(XError) -> PropertyValue? {
        var all: [UInt8] = []
        all.reserveCapacity(min(limit, 64 << 10))
        var type: UInt32 = 0
        while let event = try x.nextEvent(until: deadline) {
            guard case .propertyNotify(let w, let atom, _, let deleted) = event, w == window, atom == transfer, !deleted,
                  var piece = try x.property(transfer, of: window, delete: true, limit: limit) else { continue }
            defer { wipe(&piece.bytes) }
            if piece.bytes.isEmpty { return PropertyValue(type: type, format: 8, bytes: all) }
            guard all.count + piece.bytes.count <= limit else { break }
            type = piece.type
            all += piece.bytes
        }
        wipe(&all)
        return nil
    }
}
