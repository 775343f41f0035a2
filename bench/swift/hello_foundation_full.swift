import Foundation
// A bare Swift process that links all of Foundation (JSONSerialization and NSString are not in
// FoundationEssentials), as the vault binary does today.
let text = try! JSONSerialization.data(withJSONObject: ["hello": NSString(string: "world")])
print("hello \(text.count)")
