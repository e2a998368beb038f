from django import forms

from .paths import PathError, check_name


class NameForm(forms.Form):
    """A new folder's name, or a new name for an entry (one path component)."""

    name = forms.CharField(max_length=255)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        try:
            return check_name(name)
        except PathError as e:
            raise forms.ValidationError(e.message) from None


class ShareForm(forms.Form):
    expires_days = forms.IntegerField(required=False, min_value=1, max_value=3650,
                                      help_text="Days until the link stops working; empty for never.")
