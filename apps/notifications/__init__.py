"""In-app notifications (the bell) for events that otherwise go only by email or webhook."""
