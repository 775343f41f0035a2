import Foundation
import Testing
@testable import VaultKit

/// The pool behind `randomBytes`: no bytes handed out twice across refills and threads, and
/// requests larger than its share go straight to libsodium.
@Suite struct RandomPoolTests {
    @Test func noValueRepeatsAcrossRefillsAndThreads() async {
        // 8 threads x 2,000 draws of 24 bytes: many refills of the 4 KiB pool, under contention.
        let draws = await withTaskGroup(of: [[UInt8]].self) { group in
            for _ in 0..<8 { group.addTask { (0..<2000).map { _ in randomBytes(24) } } }
            var all: [[UInt8]] = []
            for await part in group { all += part }
            return all
        }
        #expect(draws.count == 16_000 && Set(draws).count == 16_000)
        #expect(draws.allSatisfy { $0.count == 24 })
        // Not a constant stream: every byte value shows up in 384,000 random bytes.
        #expect(Set(draws.joined()).count == 256)
    }

    @Test func oddAndLargeSizes() {
        for n in [0, 1, 7, 1023, 1024, 1025, 5000] {
            let a = randomBytes(n), b = randomBytes(n)
            #expect(a.count == n && b.count == n)
            if n >= 7 { #expect(a != b) }
        }
        #expect(randomKeyBytes(32) != randomKeyBytes(32))
    }
}
