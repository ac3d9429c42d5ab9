//! Text fields over parsed values: what a person types stays as typed, valid or not, and
//! reaches the model only when it parses; the field shows the model again once it is left
//! with a valid value. (A field rebuilt from the model each frame loses every key that does
//! not parse on its own: typing `500/30m` over `1000/1h` used to give `5001000/1h`.)

/// The typed text of one field, kept between frames while it differs from the model's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldDraft {
    text: Option<String>,
}

impl FieldDraft {
    /// What the field shows: the draft while there is one, else the model's own text.
    pub fn shown(&self, model: impl FnOnce() -> String) -> String {
        self.text.clone().unwrap_or_else(model)
    }

    /// The person changed the text: it is kept as typed; the parsed value, when it parses,
    /// is what the model should take now.
    pub fn edited<T, E>(&mut self, text: String, parse: impl FnOnce(&str) -> Result<T, E>) -> Option<T> {
        let parsed = parse(&text).ok();
        self.text = Some(text);
        parsed
    }

    /// Called each frame the field does not have the focus: a draft that parses has reached
    /// the model already and is dropped (the field shows the model's text, as normalised);
    /// one that does not parse stays, with its error, until it is fixed.
    pub fn unfocused<T, E>(&mut self, parse: impl FnOnce(&str) -> Result<T, E>) {
        if self.text.as_deref().is_some_and(|text| parse(text).is_ok()) {
            self.text = None;
        }
    }

    /// Whether the field shows something the model does not hold yet.
    pub fn is_pending(&self) -> bool {
        self.text.is_some()
    }
}

/// A single-line text field over a value parsed by `parse`, its draft kept in egui's memory
/// under the field's id. Returns the parsed value when an edit makes the text valid, and the
/// current text's error (if any) for the caller to show.
pub fn parsed_text_ui<T>(
    ui: &mut egui::Ui,
    name: &str,
    width: f32,
    model: impl FnOnce() -> String,
    parse: impl Fn(&str) -> Result<T, String>,
) -> (Option<T>, Option<String>) {
    let id = ui.make_persistent_id(name);
    let mut draft: FieldDraft = ui.data(|data| data.get_temp(id)).unwrap_or_default();
    let mut text = draft.shown(model);
    let response = ui.add(egui::TextEdit::singleline(&mut text).id(id).desired_width(width)).accessible_name(name);
    let mut parsed = None;
    if response.changed() {
        parsed = draft.edited(text.clone(), &parse);
    } else if !response.has_focus() {
        draft.unfocused(&parse);
    }
    let error = parse(&text).err();
    ui.data_mut(|data| {
        if draft.is_pending() {
            data.insert_temp(id, draft);
        } else {
            data.remove::<FieldDraft>(id);
        }
    });
    (parsed, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &str) -> Result<(u64, String), String> {
        let (limit, window) = text.split_once('/').ok_or("LIMIT/WINDOW")?;
        let limit = limit.parse::<u64>().map_err(|err| err.to_string())?;
        crate::engine::parse_duration(window).map_err(|err| err.to_string())?;
        Ok((limit, window.to_owned()))
    }

    /// Types `keys` one at a time after select-all and delete, as a person does; returns the
    /// field's text after each key and the model at the end.
    fn type_over(model: &mut String, keys: &str) -> Vec<String> {
        let mut draft = FieldDraft::default();
        let mut shown = Vec::new();
        let mut text = String::new();
        if let Some((limit, window)) = draft.edited(text.clone(), window) {
            *model = format!("{limit}/{window}");
        }
        for key in keys.chars() {
            text = draft.shown(|| model.clone());
            text.push(key);
            if let Some((limit, window)) = draft.edited(text.clone(), window) {
                *model = format!("{limit}/{window}");
            }
            shown.push(draft.shown(|| model.clone()));
        }
        draft.unfocused(window);
        shown.push(draft.shown(|| model.clone()));
        shown
    }

    #[test]
    fn every_key_typed_stays_and_the_model_takes_the_valid_text() {
        let mut model = "1000/1h".to_owned();
        let shown = type_over(&mut model, "500/30m");
        assert_eq!(shown, ["5", "50", "500", "500/", "500/3", "500/30", "500/30m", "500/30m"]);
        assert_eq!(model, "500/30m");
    }

    #[test]
    fn an_invalid_text_stays_shown_after_leaving_and_the_model_keeps_the_last_valid_value() {
        let mut model = "1000/1h".to_owned();
        let shown = type_over(&mut model, "500/30");
        assert_eq!(shown.last().map(String::as_str), Some("500/30"), "what was typed is not replaced");
        assert_eq!(model, "1000/1h", "nothing invalid reached the model");
    }

    #[test]
    fn a_valid_draft_gives_way_to_the_model_once_the_field_is_left() {
        let mut draft = FieldDraft::default();
        assert_eq!(draft.edited("7/1m".to_owned(), window), Some((7, "1m".to_owned())));
        assert!(draft.is_pending());
        draft.unfocused(window);
        assert!(!draft.is_pending());
        assert_eq!(draft.shown(|| "8/1m".to_owned()), "8/1m", "a slider moved meanwhile: the model shows");
    }
}
