from django import forms
from django.conf import settings

from accounts.models import Datacenter, Registry

from .logstore import MAX_LOG_LINES
from .models import Job


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        kwargs.setdefault("allow_empty_file", True)  # packages have empty __init__.py files
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        files = data if isinstance(data, (list, tuple)) else [data] if data else []
        return [super(MultipleFileField, self).clean(f, initial) for f in files]


class JobForm(forms.Form):
    """Types and help texts only; the rules live in jobs.validation, shared with the APIs."""

    name = forms.CharField(max_length=40, help_text="Lowercase letters, digits and '-', starting with a letter; "
                                                    "unique among your jobs. No '_'.")
    datacenter = forms.ChoiceField(help_text="Where the job runs.")
    mode = forms.ChoiceField(choices=Job.Mode.choices, initial=Job.Mode.PS,
                             help_text="Parameter servers + trainers, or collective trainers (all-reduce).")
    source = forms.ChoiceField(
        choices=[("upload", "Upload it now"), ("pfs", "Already in my storage")], initial="upload",
        widget=forms.RadioSelect, help_text="Where the training package comes from.")
    files = MultipleFileField(required=False, help_text="The package's files, or one .zip / .tar.gz of it. "
                                                        "Stored in your home under jobs/<name>/.")
    package = forms.CharField(label="Package path", required=False, help_text="A directory in your storage, "
                                                        "e.g. /pfs/local/home/<you>/jobs/fit-a-line")
    entry = forms.CharField(initial="python train.py", help_text="The command each replica runs in the package "
                                                                 "directory.")
    trainers = forms.IntegerField(initial=2, help_text="Number of trainer processes (at least 1).")
    pservers = forms.IntegerField(initial=2, help_text="Number of parameter servers (ps mode; 0 in collective).")
    cpu = forms.CharField(label="CPU", initial="1", help_text="CPU per trainer: cores (1, 0.5) or millicores (500m).")
    memory = forms.CharField(initial="1Gi", help_text="Memory per trainer, e.g. 512Mi or 2Gi.")
    gpu = forms.IntegerField(label="GPU", initial=0, help_text="GPUs per trainer.")
    pscpu = forms.CharField(label="Pserver CPU", initial="1", help_text="CPU per parameter server.")
    psmemory = forms.CharField(label="Pserver memory", initial="1Gi", help_text="Memory per parameter server.")
    passes = forms.IntegerField(initial=5, help_text="Number of passes over the data (PADDLE_INIT_NUM_PASSES).")
    image = forms.CharField(required=False, help_text="Docker image (Kubernetes datacenters); "
                                                      "the datacenter's default when empty.")
    registry = forms.ChoiceField(required=False, help_text="One of your registries, to pull a private image.")
    env = forms.CharField(label="Environment", required=False, widget=forms.Textarea(attrs={"rows": 3}),
                          help_text="Extra environment variables, one NAME=value per line.")
    timeout = forms.IntegerField(required=False, help_text="Fail the job if it runs longer than this many seconds.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["datacenter"].choices = [(d.name, d.name) for d in Datacenter.objects.all()]
        self.fields["datacenter"].initial = settings.DEFAULT_DATACENTER
        self.fields["registry"].choices = [("", "—")] + [
            (r.name, f"{r.name} ({r.server})") for r in Registry.objects.filter(user=user)]

    def clean_env(self):
        env = {}
        for n, line in enumerate(self.cleaned_data["env"].splitlines(), 1):
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"line {n}: write NAME=value")
            env[key.strip()] = value.strip()
        return env

    def clean(self):
        data = super().clean()
        if data.get("source") == "pfs" and not data.get("package"):
            self.add_error("package", "give the package's directory in your storage")
        if data.get("source") == "upload" and not data.get("files"):
            self.add_error("files", "choose the package's files, or one .zip or .tar.gz")
        return data


class LogLinesForm(forms.Form):
    """?lines= of a replica's log page: how many of the last lines to show."""

    lines = forms.IntegerField(required=False, min_value=0, max_value=MAX_LOG_LINES)
