import BrowserLoginProtocol
import Foundation

/// docs/protocol.md §8: a small application API that accepts the native
/// session's access token. An expired access token answers 401
/// TOKEN_EXPIRED before the request is processed.
extension LoginService {
    static let maximumNoteLength = 2000

    func demoAPI(_ request: HTTPServerRequest, _ rest: String, _ route: inout String) throws(APIError)
        -> HTTPServerResponse
    {
        switch rest {
        case "me":
            route = "api.me"
            try requireMethod(request, "GET")
            let (_, user) = try authenticate(request)
            return json(200, user.account)
        case "notes":
            route = "api.notes"
            try requireMethod(request, "GET", "POST")
            let (_, user) = try authenticate(request)
            if request.method == "GET" {
                let notes: [Note] = try store.perform { db in
                    try db.query("SELECT * FROM notes WHERE user_id = ? ORDER BY created_at, id", user.id).map {
                        Note(
                            id: $0.text("id"), text: $0.text("text"),
                            createdAt: Timestamp(millisecondsSince1970: $0.millis("created_at")))
                    }
                }
                return json(200, NotesResponse(notes: notes))
            }
            try requireJSONBody(request)
            let body = try decode(CreateNoteRequest.self, request)
            guard !body.text.isEmpty, body.text.count <= Self.maximumNoteLength else {
                throw APIError(.invalidRequest, "a note's text is 1 to \(Self.maximumNoteLength) characters")
            }
            let note = Note(id: try randomToken(bytes: 12), text: body.text, createdAt: Timestamp(millisecondsSince1970: clock()))
            try store.perform { db in
                try db.run(
                    "INSERT INTO notes (id, user_id, text, created_at) VALUES (?, ?, ?, ?)", note.id, user.id, note.text,
                    note.createdAt.millisecondsSince1970)
            }
            return json(201, note)
        default:
            throw APIError(.notFound, "no such API route")
        }
    }
}
